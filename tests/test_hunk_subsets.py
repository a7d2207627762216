"""The subset builder of hunk localization (issue 43) on real git: a culprit's first-parent diff
(a merge's against its first parent, a range's combined), any subset of its hunks applied to
the parent, renames and binary files set aside, a subset that does not apply reported as such
with the worktree left clean."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest

from perfbisect.gitrepo import Mirror, PatchDoesNotApply, apply_patch
from perfbisect.service.bisect.hunks import split_diff, subset_patch
from tests.gitrepo import git

GEMM = "".join(f"line {i}\n" for i in range(1, 41))


def commit(repo: Path, files: dict[str, str | bytes | None], subject: str) -> str:
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
        elif isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD")


def _edit(text: str, **lines: str) -> str:
    out = text.splitlines(keepends=True)
    for key, new in lines.items():
        out[int(key[1:]) - 1] = new
    return "".join(out)


@pytest.fixture()
def history(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {"base": commit(repo, {"gemm.py": GEMM, "norm.py": "a\nb\nc\n", "old.py": GEMM, "logo.png": b"\x89PNG\0\1"},
                           "base")}
    culprit = {"gemm.py": _edit(GEMM, l3="line 3 cleaned\n", l20="BLOCK_K = 32\n", l38="line 38 cleaned\n")
               + "tail\n", "norm.py": "a\nb2\nc\n"}
    shas["culprit"] = commit(repo, culprit, "cleanup (#974)")
    shas["later"] = commit(repo, {"norm.py": "a\nb3\nc\n"}, "norm again")
    shas["moves"] = commit(repo, {"old.py": None, "new.py": _edit(GEMM, l1="moved\n"), "logo.png": b"\x89PNG\0\2"},
                           "rename and logo")
    git(repo, "checkout", "-q", "-b", "side", shas["base"])
    commit(repo, {"side.txt": "s\n"}, "side work")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge pull request #7 from side", "side")
    shas["merge"] = git(repo, "rev-parse", "HEAD")
    mirror = Mirror(tmp_path / "mirrors", "repo", str(repo))
    mirror.ensure(fetch=False)
    return mirror, tmp_path / "worktree", shas


def test_every_subset_of_the_hunks_applies_to_the_parent(history) -> None:
    mirror, worktree, shas = history
    split = split_diff(mirror.culprit_diff(shas["culprit"], shas["culprit"]))
    assert [h.path for h in split.hunks] == ["gemm.py", "gemm.py", "gemm.py", "norm.py"]
    for size in range(1, len(split.hunks) + 1):
        for chosen in combinations(split.hunks, size):
            mirror.checkout(worktree, shas["base"])
            apply_patch(worktree, subset_patch(chosen))
            text = (worktree / "gemm.py").read_text()
            assert ("BLOCK_K = 32\n" in text) == any(h.index == 1 for h in chosen)
            assert ("line 38 cleaned\n" in text) == any(h.index == 2 for h in chosen)
            assert git(worktree, "rev-parse", "HEAD") == shas["base"]  # nothing committed
    mirror.checkout(worktree, shas["base"])
    apply_patch(worktree, subset_patch(split.hunks))  # all of them: the culprit's tree
    assert git(worktree, "diff", shas["culprit"]) == ""


def test_a_range_localizes_over_its_combined_diff(history) -> None:
    mirror, _worktree, shas = history
    split = split_diff(mirror.culprit_diff(shas["culprit"], shas["later"]))
    norm = [h for h in split.hunks if h.path == "norm.py"]
    assert len(norm) == 1 and "+b3" in norm[0].lines  # one hunk: parent -> last, not per commit


def test_a_merge_culprit_is_diffed_against_its_first_parent(history) -> None:
    mirror, _worktree, shas = history
    split = split_diff(mirror.culprit_diff(shas["merge"], shas["merge"]))
    assert [h.path for h in split.hunks] == ["side.txt"]


def test_renames_and_binary_files_are_set_aside_with_the_reason(history) -> None:
    mirror, _worktree, shas = history
    split = split_diff(mirror.culprit_diff(shas["moves"], shas["moves"]))
    assert split.hunks == ()
    reasons = {a.path: a.reason for a in split.set_aside}
    assert reasons["new.py"].startswith("renamed from old.py")
    assert reasons["logo.png"].startswith("binary file")


def test_a_subset_that_does_not_apply_is_reported_and_the_worktree_left_clean(history) -> None:
    mirror, worktree, shas = history
    split = split_diff(mirror.culprit_diff(shas["culprit"], shas["culprit"]))
    mirror.checkout(worktree, shas["later"])  # norm.py's line moved on since the culprit
    with pytest.raises(PatchDoesNotApply) as caught:
        apply_patch(worktree, subset_patch([split.hunks[1], split.hunks[3]]))
    assert "do not apply" in str(caught.value)
    assert git(worktree, "status", "--porcelain") == ""
