"""`perfbisect track ...` as a user runs it: embedded (SQLite in a fresh home, no broker), clear
messages and exit code 2 for bad input, never a traceback. The first command runs as the
installed `perfbisect` process (its stderr, its exit code); the rest in this process (the same
Typer app: a CLI process each took seconds of imports on the 2-core CI machine)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from perfbisect.cli.common import USAGE
from perfbisect.cli.main import app
from tests.e2e_support import BIN, service_env
from tests.gitrepo import make_repo
from tests.test_cli_outcomes import embedded  # noqa: F401  (fixture)

GEMM = ["--suite", "gemm", "--target", "lib.gemm:matmul", "--shape", "M=64,N=64,K=64,dtype=fp32"]
runner = CliRunner()


def track(*args: str):
    """`perfbisect track ARGS` in this process; a traceback would be an exception here."""
    result = runner.invoke(app, ["track", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_track_add_list_remove_and_bad_input(embedded, tmp_path: Path) -> None:  # noqa: F811
    repo = tmp_path / "lib"
    make_repo(repo, ["initial (#1)", "gemm (#2)"])

    bad = subprocess.run([str(BIN / "perfbisect"), "track", "add", "--repo", str(repo), "--suite", "nosuch",
                          "--target", "lib.gemm:matmul", "--shape", "M=1"],
                         env=service_env(embedded, None, None), capture_output=True, text=True, timeout=300)
    assert bad.returncode == USAGE and "nosuch" in bad.stderr and "Traceback" not in bad.stderr
    branch = track("add", "--repo", str(repo), *GEMM, "--branch", "nope", "--no-start")
    assert branch.exit_code == USAGE and "'nope' does not exist" in branch.output

    added = track("add", "--repo", str(repo), *GEMM, "--no-start", "--min-magnitude", "0.1")
    assert added.exit_code == 0, added.output
    assert "tracking main of lib on cpu as #1" in added.stdout
    [tracked] = json.loads(track("list", "--json").stdout)
    assert tracked["cases"][0]["name"] == "gemm M=64,N=64,K=64,dtype=fp32" and tracked["min_magnitude"] == 0.1
    again = track("add", "--repo", str(repo), *GEMM, "--no-start")
    assert again.exit_code == USAGE and "already tracked" in again.output
    assert track("alerts").stdout.strip() == "no alerts"
    assert track("remove", "1").exit_code == 0
    gone = track("remove", "1")
    assert gone.exit_code == USAGE and "no tracked branch 1" in gone.output


def test_an_alert_whose_bisect_named_nothing_does_not_read_bisecting_forever() -> None:
    from types import SimpleNamespace

    from perfbisect.cli.track import alert_lines

    alert = SimpleNamespace(id=3, kind="regression", status="new", before_sha="a" * 40, last_sha="b" * 40,
                            culprit_exact=False, culprit_first_sha=None, culprit_last_sha=None, bisect_job_id=14,
                            note="bisect job 14 inconclusive without naming a culprit for this alert",
                            culprit_pr=None, culprit_subject=None, cases=[])
    assert "culprit none: bisect job 14 inconclusive" in alert_lines([alert])[0]
    running = SimpleNamespace(**{**vars(alert), "note": "looking into it"})
    assert "culprit bisecting" in alert_lines([running])[0]


def test_track_edit_changes_a_tracked_branch_and_refuses_bad_input(embedded, tmp_path: Path) -> None:  # noqa: F811
    repo = tmp_path / "lib"
    make_repo(repo, ["initial (#1)", "gemm (#2)"])
    assert track("add", "--repo", str(repo), *GEMM, "--no-start").exit_code == 0
    edited = track("edit", "1", "--trigger", "schedule", "--interval", "900", "--confirm-trials", "0",
                   "--suite", "gemm", "--target", "lib.gemm:matmul", "--shape", "M=32,N=32,K=32,dtype=fp32")
    assert edited.exit_code == 0, edited.output
    assert "#1 main: schedule, every 900 s, 1 case(s), 0 confirm trial(s)" in edited.stdout
    [tracked] = json.loads(track("list", "--json").stdout)
    assert (tracked["trigger"], tracked["interval_s"], tracked["confirm_trials"]) == ("schedule", 900, 0)
    assert tracked["cases"][0]["name"] == "gemm M=32,N=32,K=32,dtype=fp32"
    for args, message in ((["1"], "nothing to change"), (["1", "--trigger", "hourly"], "trigger"),
                          (["1", "--interval", "5"], "interval_s"), (["1", "--suite", "gemm"], "--target"),
                          (["1", "--benchmark-set", "nosuch"], "no benchmark set 'nosuch'"),
                          (["9", "--interval", "600"], "no tracked branch 9")):
        refused = track("edit", *args)
        assert refused.exit_code == USAGE and message in refused.output, (args, refused.output)
    assert json.loads(track("list", "--json").stdout)[0]["interval_s"] == 900  # nothing changed
