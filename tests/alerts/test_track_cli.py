"""`perfbisect track ...` as a user runs it: embedded (SQLite in a fresh home, no broker), clear
messages and exit code 2 for bad input, never a traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e_support import BIN, service_env
from tests.gitrepo import make_repo

pytestmark = pytest.mark.slow  # eight CLI processes (torch-free, but each imports the service)

GEMM = ["--suite", "gemm", "--target", "lib.gemm:matmul", "--shape", "M=64,N=64,K=64,dtype=fp32"]


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "perfbisect"), "track", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_track_add_list_remove_and_bad_input(tmp_path: Path) -> None:
    env = service_env(tmp_path / "home", None, None)
    repo = tmp_path / "lib"
    make_repo(repo, ["initial (#1)", "gemm (#2)"])

    bad = cli(env, "add", "--repo", str(repo), "--suite", "nosuch", "--target", "lib.gemm:matmul", "--shape", "M=1")
    assert bad.returncode == 2 and "nosuch" in bad.stderr and "Traceback" not in bad.stderr
    branch = cli(env, "add", "--repo", str(repo), *GEMM, "--branch", "nope", "--no-start")
    assert branch.returncode == 2 and "'nope' does not exist" in branch.stderr

    added = cli(env, "add", "--repo", str(repo), *GEMM, "--no-start", "--min-magnitude", "0.1")
    assert added.returncode == 0, added.stderr
    assert "tracking main of lib on cpu as #1" in added.stdout
    [tracked] = json.loads(cli(env, "list", "--json").stdout)
    assert tracked["cases"][0]["name"] == "gemm M=64,N=64,K=64,dtype=fp32" and tracked["min_magnitude"] == 0.1
    again = cli(env, "add", "--repo", str(repo), *GEMM, "--no-start")
    assert again.returncode == 2 and "already tracked" in again.stderr
    assert cli(env, "alerts").stdout.strip() == "no alerts"
    assert cli(env, "remove", "1").returncode == 0
    gone = cli(env, "remove", "1")
    assert gone.returncode == 2 and "no tracked branch 1" in gone.stderr


def test_an_alert_whose_bisect_named_nothing_does_not_read_bisecting_forever() -> None:
    from types import SimpleNamespace

    from perfbisect.service.cli.track import alert_lines

    alert = SimpleNamespace(id=3, kind="regression", status="new", before_sha="a" * 40, last_sha="b" * 40,
                            culprit_exact=False, culprit_first_sha=None, culprit_last_sha=None, bisect_job_id=14,
                            note="bisect job 14 inconclusive without naming a culprit for this alert",
                            culprit_pr=None, culprit_subject=None, cases=[])
    assert "culprit none: bisect job 14 inconclusive" in alert_lines([alert])[0]
    running = SimpleNamespace(**{**vars(alert), "note": "looking into it"})
    assert "culprit bisecting" in alert_lines([running])[0]
