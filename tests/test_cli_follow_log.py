"""Following a job from a log (a CI job, nohup): one line per round and one at the end, with
trials, revisions, culprits and an ETA; a bar is drawn only on a terminal."""
from __future__ import annotations

import io
from datetime import datetime, timezone

from rich.console import Console

from perfbisect.cli.follow import follow, progress_line
from perfbisect.service.jobs.schemas import JobRead


def job(status: str, rounds: int, trials: int, expected: int | None, culprits: int = 0) -> JobRead:
    return JobRead(id=7, kind="bisect", status=status, repository="minikern", spec={}, revision_shas=[],
                   progress={"rounds": rounds, "trials": trials, "expected_trials": expected, "measured": rounds * 2,
                             "revisions": 46, "culprits": culprits},
                   error=None, created_at=datetime.now(timezone.utc), started_at=None, finished_at=None,
                   culprits=[])


def test_a_log_gets_one_line_per_round_and_one_at_the_end():
    polls = iter([job("queued", 0, 0, None), job("running", 1, 6, 40), job("running", 1, 8, 40),
                  job("running", 1, 9, 40), job("running", 2, 12, 40, 1), job("succeeded", 3, 30, 30, 2)])
    out = io.StringIO()
    finished = follow(lambda: next(polls), Console(file=out, force_terminal=False, width=200), poll_s=0)
    lines = out.getvalue().splitlines()
    assert finished.status == "succeeded"
    assert [line.split(":")[0] for line in lines] == ["job 7 queued", "job 7 running", "job 7 running",
                                                      "job 7 succeeded"]
    assert "round 2, 12/40 trials, 4/46 revisions, 1 culprit(s)" in lines[2] and "ETA" in lines[2]
    assert "30/30 trials" in lines[3] and "ETA" not in lines[3]


def test_the_eta_follows_the_pace_so_far():
    assert progress_line(job("running", 2, 10, 40), elapsed_s=60).endswith("1m00s elapsed, ETA 3m00s")
    assert "ETA" not in progress_line(job("running", 1, 0, None), elapsed_s=5)
