"""Checking a revision out of the mirror into a slot's worktree, after what a killed worker
leaves behind."""

from __future__ import annotations

import shutil
from pathlib import Path

from perfbisect.gitrepo import Mirror
from tests.gitrepo import git, make_repo


def test_a_worktree_left_locked_by_a_killed_add_is_checked_out_again(tmp_path: Path) -> None:
    # `git worktree add` locks the new worktree ("initializing") until it is done: a worker
    # killed inside it leaves a missing but locked worktree, which `worktree prune` keeps and a
    # plain `add --force` refuses, so every later trial in that slot failed on the worker.
    shas = make_repo(tmp_path / "lib", ["one", "two"])
    mirror = Mirror(tmp_path / "mirrors", "lib", str(tmp_path / "lib"))
    mirror.ensure(fetch=True)
    worktree = tmp_path / "slot-0" / "worktree"
    mirror.checkout(worktree, shas[0])
    git(mirror.path, "worktree", "lock", "--reason", "initializing", str(worktree))
    shutil.rmtree(worktree)  # the replacement worker sweeps the dead one's slot

    assert mirror.checkout(worktree, shas[1]) == worktree
    assert git(worktree, "rev-parse", "HEAD") == shas[1]
