"""Issue 40, item 1: the root worker follows nothing that repository code left behind. A hostile
repository (tests/hostile/paths.py) run through the real path (`execute`: slot, checkout, build,
build cache, forked trial) as root with the sandbox user makes its build directory, a trial-cache
entry and its result file symlinks into root-only places, and leaves a deep tree, a FIFO, a
socket and a sparse file in its build output; then the build cache itself is handed a hardlink to
another user's file and a device node. Nothing root-only is read, copied or deleted, and the
worker goes on (docs/containment.md, "What the root worker does with what repository code left")."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest

from perfbisect.kernels.harness import launch
from perfbisect.service.settings import get_settings
from perfbisect.workers import buildcache, sandbox
from perfbisect.workers.trialcache import slot_cache_root
from tests.hostile import reported, write_hostile_repo
from tests.hostile.paths import PATH_ESCAPES
from tests.test_hostile import run, shared_sandbox  # noqa: F401  (fixture)

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user needs a root worker"),
              pytest.mark.skipif(not launch.fork_available(), reason="needs Linux")]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("hostile-paths") / "repo"
    return repo, write_hostile_repo(repo, "0", PATH_ESCAPES)


@pytest.fixture
def secret() -> tuple[Path, str]:
    """A root-only directory (0700) holding secret.txt and secret.json (0600), both naming a
    token that must appear in no result; yields (directory, token)."""
    token = f"SECRET-{secrets.token_hex(8)}"
    directory = Path(tempfile.mkdtemp(prefix="perfbisect-secret-"))
    (directory / "secret.txt").write_text(token)
    (directory / "secret.json").write_text(json.dumps({"status": "ok", "cases": [], "device": {"kind": token}}))
    for path in (directory / "secret.txt", directory / "secret.json"):
        path.chmod(0o600)
    directory.chmod(0o700)
    yield directory, token
    shutil.rmtree(directory, ignore_errors=True)


def test_a_symlinked_build_dir_is_neither_cached_nor_restored(hostile, secret):
    directory, token = secret
    env = {"HOSTILE_SECRET_DIR": str(directory)}
    built = run(hostile, "symlink_build_dir", env=env, build_inputs=("build.sh",))
    again = run(hostile, "symlink_build_dir", env=env, build_inputs=("build.sh",))
    assert built["build"]["stored"] is False and "symlink" in built["build"]["note"], built["build"]
    assert again["build"]["cached"] is False, again["build"]
    cache = get_settings().home / "build-cache"
    assert not [p for p in cache.rglob("secret*")] if cache.is_dir() else True
    assert token not in json.dumps(built) + json.dumps(again)
    seen = reported(again)
    assert seen is not None and seen["build"] in ("PermissionError", "FileNotFoundError"), seen


def test_a_symlinked_result_file_is_not_read(hostile, secret):
    directory, token = secret
    result = run(hostile, "symlink_result", env={"HOSTILE_SECRET_DIR": str(directory)})
    assert token not in json.dumps(result), result
    assert result["status"] == "error" and "PLANTED 1" in result["error"], result
    assert "result" in result["error"] and "symlink" in result["error"], result["error"]


def test_a_symlinked_trial_cache_entry_does_not_make_prune_delete_outside_the_slot(hostile, monkeypatch):
    victim = Path(tempfile.mkdtemp(prefix="perfbisect-victim-"))
    try:
        for name in ("a", "b", "c"):
            (victim / name).mkdir()
            (victim / name / "keep").write_text(name)
            os.utime(victim / name, (time.time() - 3600,) * 2)
        victim.chmod(0o700)
        monkeypatch.setattr(get_settings(), "trial_cache_keep", 1)
        planted = run(hostile, "symlink_cache", env={"HOSTILE_VICTIM_DIR": str(victim)})
        tree = slot_cache_root(get_settings(), sandbox.slots_root() / "slot-0")
        if sandbox.use_namespaces(sandbox.slot_user(sandbox.sandbox_user(), 0, get_settings())):
            # a trial's view holds its revision's caches only (tests/hostile/test_views.py): the
            # link is planted here instead, as a trial of an older version could have left it
            assert "PLANTED" not in json.dumps(planted), planted
            os.symlink(victim, tree / "0-toolchain")
        else:
            assert planted["status"] == "ok" and "PLANTED" in (planted.get("log_tail") or ""), planted
        assert (tree / "0-toolchain").is_symlink()
        after = run(hostile, "benign")  # the next trial of the slot prunes its caches
        assert after["status"] == "ok", after
        assert sorted(p.name for p in victim.iterdir()) == ["a", "b", "c"]
        assert all((victim / name / "keep").read_text() == name for name in ("a", "b", "c"))
    finally:
        shutil.rmtree(victim, ignore_errors=True)


def test_a_build_output_deeper_than_the_limit_is_not_cached_and_the_slot_is_still_wiped(hostile, shared_sandbox):
    result = run(hostile, "deep_build", build_inputs=("build.sh",))
    assert result["status"] == "ok", result
    assert result["build"]["stored"] is False and "deeper than" in result["build"]["note"], result["build"]
    slots = [p for p in (shared_sandbox).rglob("slot-*") if p.is_dir()]
    assert slots and all(sorted(q.name for q in p.iterdir()) in ([], ["home", "scratch", "tmp"]) and
                         not (p / "worktree").exists() for p in slots), slots


def test_a_sparse_file_past_the_byte_limit_is_not_cached(hostile, monkeypatch):
    monkeypatch.setattr(buildcache, "MAX_BYTES", 64 * 2**20, raising=False)
    result = run(hostile, "odd_build", build_inputs=("build.sh",))
    assert result["status"] == "ok", result
    assert result["build"]["stored"] is False and "bytes" in result["build"]["note"], result["build"]


def _tree_of_another_user(top: Path, uid: int, secret_file: Path) -> None:
    """A build output of uid `uid` holding, besides its own files, a hardlink to a root-only
    file (what a host without protected_hardlinks lets any user make), a device node, a FIFO
    and a socket."""
    (top / "sub").mkdir(parents=True)
    (top / "own.so").write_text("own")
    (top / "sub" / "own.py").write_text("x = 1")
    os.link(secret_file, top / "hard")
    os.mknod(top / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mkfifo(top / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(top / "sock"))
    for path in [top, *top.rglob("*")]:
        if path.name != "hard":
            os.lchown(path, uid, uid)


def test_the_cache_copies_only_the_builders_own_files_and_directories(tmp_path, secret):
    directory, token = secret
    worktree = tmp_path / "worktree"
    _tree_of_another_user(worktree / "out", 54321, directory / "secret.txt")
    root = tmp_path / "cache"
    why_not = buildcache.store(root, "k", worktree, "out", {}, owner=54321)
    assert why_not is None
    cached = root / "k" / "build"
    assert sorted(str(p.relative_to(cached)) for p in cached.rglob("*")) == ["own.so", "sub", "sub/own.py"]
    assert token not in json.dumps(buildcache.lookup(root, "k"))
    assert {"hard", "null", "fifo", "sock"} == {s.split(" ")[0] for s in buildcache.lookup(root, "k")["skipped"]}
    restored = tmp_path / "slot-worktree"
    restored.mkdir()
    buildcache.restore(root, "k", restored, "out", give=(54321, 54321))
    out = restored / "out"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["own.so", "sub", "sub/own.py"]
    assert {p.lstat().st_uid for p in [out, *out.rglob("*")]} == {54321}


def test_restore_replaces_a_planted_symlink_without_following_it(tmp_path, secret):
    directory, token = secret
    source = tmp_path / "src"
    (source / "out").mkdir(parents=True)
    (source / "out" / "lib.so").write_text("lib")
    root = tmp_path / "cache"
    assert buildcache.store(root, "k", source, "out", {}, owner=os.geteuid()) is None
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / "out").symlink_to(directory)  # a survivor's swap, before the worker restores
    buildcache.restore(root, "k", worktree, "out")
    assert not (worktree / "out").is_symlink() and (worktree / "out" / "lib.so").read_text() == "lib"
    assert sorted(p.name for p in directory.iterdir()) == ["secret.json", "secret.txt"]


def test_the_slot_give_and_wipe_never_cross_a_symlink_and_reach_any_depth(secret, shared_sandbox):
    directory, _ = secret
    with sandbox.slot() as box:
        (box.scratch / "link").symlink_to(directory)
        fd = os.open(box.home, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(1500):  # what a trial can leave in its HOME, deeper than PATH_MAX by name
            os.mkdir("d", dir_fd=fd)
            os.symlink(str(directory), "up", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(fd)
        box.give(box.scratch)
        assert directory.stat().st_uid == 0 and (directory / "secret.txt").stat().st_uid == 0
        path = box.path
    assert sorted(p.name for p in directory.iterdir()) == ["secret.json", "secret.txt"]
    assert list(path.iterdir()) == []  # wiped on release, the deep HOME included
