"""A regression fixed inside the range, on the demo history (issue 28): the bf16 GEMM swizzle is
lost at #912 (index 10, -50% or more on a CPU) and a revert five commits later brings it back,
so the two ends of 9..revert measure the same. Without --scan (the default for a range this
short) the case is unchanged and its reason says that a step fixed inside would not be seen;
with --scan 3 the interior points land in the slow stretch and both edges are named, and so they
do with --scan auto (issue 46: stretches of at most --max-gap commits between measured revisions).

Embedded CLI (SQLite, in-process tasks), one revision at a time. Times a CPU step end to end:
marked 'quiet' (pytest -m quiet), left out of `make test`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from perfbisect.kernels import demo
from perfbisect.cli.runs import DEMO_MIN_EFFECT
from tests.e2e_support import BIN, service_env, traversable_home
from tests.gitrepo import git

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.quiet]

BF16 = next(c for c in demo.DEMO_CPU_CASES if c["suite"] == "gemm" and c["params"]["dtype"] == "bf16")
GOOD, REVERT_ON = 9, 15  # before #912 (index 10); the revert is committed on top of index 15


@pytest.fixture(scope="module")
def reverted(tmp_path_factory) -> tuple[Path, list[str]]:
    """The demo repository with a branch `fixed`: indices 0..15, then a revert of #912.
    Returns the repository and the first-parent shas of that branch."""
    repo = demo.write_demo_repo(tmp_path_factory.mktemp("scan") / "minikern")
    shas = git(repo, "rev-list", "--first-parent", "--reverse", "HEAD").split()
    git(repo, "checkout", "-q", "-b", "fixed", shas[REVERT_ON])
    git(repo, "revert", "--no-edit", shas[10])
    return repo, git(repo, "rev-list", "--first-parent", "--reverse", "fixed").split()


def bisect(repo: Path, shas: list[str], cwd: Path, *extra: str) -> dict:
    shape = ",".join(f"{k}={v}" for k, v in BF16["params"].items())
    args = ["bisect", "--repo", str(repo), "--good", shas[GOOD], "--bad", shas[-1], "--suite", "gemm",
            "--target", demo.GEMM_TARGET, "--shape", shape, "--min-effect", str(DEMO_MIN_EFFECT["cpu"]),
            "--build", demo.DEMO_BUILD_COMMAND, "--policy", json.dumps(demo.DEMO_CPU_POLICY), "--json", *extra]
    done = subprocess.run([str(BIN / "perfbisect"), *args], env=service_env(traversable_home(), None, None),
                          capture_output=True, text=True, timeout=1200, cwd=cwd)
    assert done.returncode in (0, 1, 4), done.stderr[-4000:]
    return json.loads(done.stdout)


def test_scan_finds_a_regression_fixed_inside_the_range_and_its_absence_is_said(reverted, tmp_path) -> None:
    repo, shas = reverted
    pos = {sha: i for i, sha in enumerate(shas)}
    assert len(shas) - 1 - GOOD == 7  # 10..15 and the revert: a range under the default scan's 32

    blind = bisect(repo, shas, tmp_path)
    [case] = blind["outcome"]["cases"]
    assert blind["culprits"] == [] and case["outcome"] == "unchanged", blind["outcome"]
    assert "only the ends were measured: a step undone within the 7 commits of the range would not be seen: " \
        "run with --scan auto" in case["reason"]
    assert case["gap"] == {"after_sha": shas[GOOD], "before_sha": shas[-1], "commits": 7, "unseen": 6}
    assert blind["outcome"]["gap"] == case["gap"]

    scanned = bisect(repo, shas, tmp_path, "--scan", "3")
    spans = sorted((pos[c["first_sha"]], pos[c["last_sha"]]) for c in scanned["culprits"]
                   if c["kind"] == "performance")
    assert spans == [(10, 10), (len(shas) - 1, len(shas) - 1)], scanned["culprits"]


def test_scan_auto_sizes_its_points_to_the_range_and_finds_the_step_and_its_undo(reverted, tmp_path) -> None:
    """--scan auto --max-gap 3 on the 7 commits: points at 2 and 5 of the range (indices 11 and
    14, both in the slow stretch 10..15), so no stretch of more than 3 commits goes unmeasured."""
    repo, shas = reverted
    pos = {sha: i for i, sha in enumerate(shas)}
    scanned = bisect(repo, shas, tmp_path, "--scan", "auto", "--max-gap", "3")
    assert scanned["spec"]["scan"] == "auto" and scanned["spec"]["max_gap"] == 3
    spans = sorted((pos[c["first_sha"]], pos[c["last_sha"]]) for c in scanned["culprits"]
                   if c["kind"] == "performance")
    assert spans == [(10, 10), (len(shas) - 1, len(shas) - 1)], scanned["culprits"]
