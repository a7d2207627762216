"""kernels/harness/safefs.py on its own: every operation by both resolutions (openat2 where the
kernel has it, O_NOFOLLOW component by component otherwise), against symlinks on the way,
special files, other owners, sparse files and trees deeper than the fds it may hold."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from perfbisect.kernels.harness import safefs


@pytest.fixture(params=["openat2", "components"])
def resolution(request, monkeypatch) -> str:
    if request.param == "openat2" and not safefs.openat2_available():
        pytest.skip("this kernel has no openat2")
    if request.param == "components":
        monkeypatch.setattr(safefs, "openat2_available", lambda: False)
    return request.param


@pytest.fixture
def anchor(tmp_path: Path):
    fd = safefs.open_anchor(tmp_path)
    yield fd
    os.close(fd)


def test_open_beneath_refuses_symlinks_dotdot_and_absolute_paths(tmp_path, anchor, resolution):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "a" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "a" / "flink").symlink_to(tmp_path / "a" / "b" / "f")
    fd = safefs.open_beneath(anchor, "a/b")
    assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "a" / "b"))
    os.close(fd)
    for bad in ("a/link", "a/link/x", "a/flink", "../x", "/etc", "a/../../x"):
        with pytest.raises(OSError) as caught:
            safefs.open_beneath(anchor, bad, os.O_RDONLY)
        assert isinstance(caught.value, safefs.Unsafe) or caught.value.errno == 2, (bad, caught.value)
    with pytest.raises(FileNotFoundError):
        safefs.open_beneath(anchor, "a/missing")


def test_read_beneath_reads_only_a_regular_file_of_the_owner_up_to_its_limit(tmp_path, anchor, resolution):
    (tmp_path / "ok.json").write_text("{}")
    (tmp_path / "secret").write_text("root only")
    (tmp_path / "link.json").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "fifo")
    me = os.geteuid()
    assert safefs.read_beneath(anchor, "ok.json", limit=10, owner=me) == b"{}"
    for name, why in (("link.json", "symlink"), ("fifo", "fifo")):  # a FIFO is never opened: no hang
        with pytest.raises(safefs.Unsafe, match=why):
            safefs.read_beneath(anchor, name, limit=10, owner=me)
    with pytest.raises(safefs.Unsafe, match="larger than"):
        safefs.read_beneath(anchor, "secret", limit=4, owner=me)
    with pytest.raises(safefs.Unsafe, match="owned by"):
        safefs.read_beneath(anchor, "ok.json", limit=10, owner=me + 1)


def test_copy_tree_bounds_bytes_files_and_depth_counting_sparse_files_in_full(tmp_path, resolution):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "a" / "b" / "c").mkdir(parents=True)
    with open(src / "sparse", "wb") as handle:
        handle.truncate(2**30)  # 1 GiB, no block written
    limits = {"bytes": safefs.Limits(2**29, 100, 10), "files": safefs.Limits(2**31, 3, 10),
              "deeper": safefs.Limits(2**31, 100, 2)}
    for what, limit in limits.items():
        dst.mkdir()
        s, d = safefs.open_anchor(src), safefs.open_anchor(dst)
        with pytest.raises(safefs.LimitExceeded, match=what):
            safefs.copy_tree(s, d, limit, owner=os.geteuid())
        os.close(s), os.close(d)
        parent = safefs.open_anchor(tmp_path)
        safefs.remove_tree(parent, "dst")
        os.close(parent)
    dst.mkdir()
    s, d = safefs.open_anchor(src), safefs.open_anchor(dst)
    copied = safefs.copy_tree(s, d, safefs.Limits(2**31, 100, 10), owner=os.geteuid())
    assert (copied.files, copied.bytes) == (4, 2**30) and (dst / "sparse").stat().st_size == 2**30


def test_remove_tree_goes_deeper_than_its_open_fds_and_never_through_a_symlink(tmp_path, anchor, resolution):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = safefs.open_anchor(deep)
    for _ in range(3 * safefs.MAX_OPEN_DEPTH + 5):  # deeper than PATH_MAX allows by name
        os.mkdir("d", dir_fd=fd)
        os.symlink(str(outside), "link", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.mkfifo("fifo", dir_fd=fd)
    os.close(fd)
    safefs.remove_tree(anchor, "deep")
    assert not deep.exists() and (outside / "keep").read_text() == "x"
    (tmp_path / "top-link").symlink_to(outside)
    safefs.remove_tree(anchor, "top-link")  # the link, not its target
    assert not (tmp_path / "top-link").is_symlink() and (outside / "keep").exists()


def test_chown_tree_changes_links_not_their_targets(tmp_path, anchor):
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "link").symlink_to(outside)
    fd = safefs.open_beneath(anchor, "tree")
    safefs.chown_tree(fd, 54321, 54321)
    os.close(fd)
    assert outside.stat().st_uid == 0
    assert {p.lstat().st_uid for p in [tmp_path / "tree", *(tmp_path / "tree").rglob("*")]} == {54321}
    assert stat.S_ISLNK((tmp_path / "tree" / "sub" / "link").lstat().st_mode)
