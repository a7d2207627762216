"""Pull-request numbers from the commit messages the common forges write."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbisect.gitrepo import Mirror, pr_number
from tests.gitrepo import git, make_repo


@pytest.mark.parametrize(("subject", "body", "expected"), [
    ("gemm: retune bf16 tiles (#912)", "", 912),
    ("Merge pull request #21508 from someone/fix-printing", "Fix printing of nested sums", 21508),
    ("Merge branch 'fix-norm' into 'main'", "Fix the norm\n\nSee merge request kernels/minikern!77", 77),
    ("gemm: mention #912 in passing", "", None),
    ("docs: fix a typo", "Refs (#40)\n", None),          # only the subject's tail names a squash PR
    ("Merge branch 'main' into feature", "", None),
])
def test_pr_number_from_subject_and_body(subject: str, body: str, expected: int | None) -> None:
    assert pr_number(subject, body) == expected


def test_a_github_merge_commit_on_the_first_parent_names_its_pull_request(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    good, _ = make_repo(origin, ["start (#1)", "kernels: second (#2)"])
    git(origin, "checkout", "-q", "-b", "feature")
    (origin / "feature.txt").write_text("x\n")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "feature work")
    git(origin, "checkout", "-q", "main")
    git(origin, "merge", "-q", "--no-ff", "feature", "-m", "Merge pull request #21508 from someone/feature")
    mirror = Mirror(tmp_path / "mirrors", "origin", str(origin))
    commits = mirror.first_parent_range(good, mirror.resolve("main"))
    assert [c.pr_number for c in commits] == [1, 2, 21508]
