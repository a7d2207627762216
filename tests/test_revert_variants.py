"""Attribution variants in the worker's worktree: culprits reverted with `git revert --no-commit`
at the bad end, a range reverted whole, a revert that does not apply reported with its files
(never an error), and the worktree clean again for the next trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbisect.gitrepo import Mirror, RevertConflict
from tests.gitrepo import git


def commit(repo: Path, files: dict[str, str], subject: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture()
def history(tmp_path: Path) -> tuple[Mirror, Path, dict[str, str]]:
    """a.py and b.py; #2 and #3 change a.py's line, #4 changes b.py, #5 touches a.py's line again."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {"base": commit(repo, {"a.py": "x = 1\n\n\n\ny = 1\n", "b.py": "z = 1\n"}, "base (#1)")}
    shas["x2"] = commit(repo, {"a.py": "x = 2\n\n\n\ny = 1\n"}, "x = 2 (#2)")
    shas["y2"] = commit(repo, {"a.py": "x = 2\n\n\n\ny = 2\n"}, "y = 2 (#3)")
    shas["z2"] = commit(repo, {"b.py": "z = 2\n"}, "z = 2 (#4)")
    shas["x3"] = commit(repo, {"a.py": "x = 3\n\n\n\ny = 2\n"}, "x = 3 (#5)")
    mirror = Mirror(tmp_path / "mirrors", "repo", str(repo))
    mirror.ensure(fetch=False)
    return mirror, tmp_path / "worktree", shas


def test_reverts_apply_alone_together_and_as_a_range(history) -> None:
    mirror, worktree, shas = history
    head = shas["x3"]
    mirror.checkout(worktree, head)
    mirror.revert(worktree, [(shas["y2"], shas["y2"]), (shas["z2"], shas["z2"])])
    assert (worktree / "a.py").read_text() == "x = 3\n\n\n\ny = 1\n"
    assert (worktree / "b.py").read_text() == "z = 1\n"
    assert git(worktree, "rev-parse", "HEAD") == head  # nothing committed: the trial is `head` + a variant
    mirror.checkout(worktree, head)  # the next trial: the commit as it is
    assert (worktree / "b.py").read_text() == "z = 2\n"
    mirror.revert(worktree, [(shas["y2"], shas["z2"])])  # a culprit range reverts the range
    assert (worktree / "a.py").read_text() == "x = 3\n\n\n\ny = 1\n" and (worktree / "b.py").read_text() == "z = 1\n"


def test_a_revert_that_does_not_apply_names_its_files_and_leaves_the_commit(history) -> None:
    mirror, worktree, shas = history
    mirror.checkout(worktree, shas["x3"])
    with pytest.raises(RevertConflict) as caught:  # #5 changed the line #2 changed
        mirror.revert(worktree, [(shas["x2"], shas["x2"])])
    assert caught.value.files == ["a.py"]
    assert str(caught.value) == "does not revert cleanly at the head: conflicts in a.py"
    assert git(worktree, "status", "--porcelain") == ""
    mirror.checkout(worktree, shas["x3"])  # the slot is usable again: a clean revert works
    mirror.revert(worktree, [(shas["z2"], shas["z2"])])
    assert (worktree / "b.py").read_text() == "z = 1\n"
