"""Following a job from a log (a CI job, nohup): one line per round and one at the end, with
trials, revisions, culprits and an ETA; a bar is drawn only on a terminal."""
from __future__ import annotations

import io
import re
from datetime import datetime, timezone

from rich.console import Console

from perfbisect.cli.follow import MonotoneBar, follow, progress_line
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


def test_the_bar_never_goes_backwards_when_the_planner_re_estimates():
    """Issue 42: the expected total fell and rose again each round and the bar went backwards.
    The done count never shrinks, the total only grows, and a finished job is a full bar."""
    shown = MonotoneBar()
    assert shown.update(job("queued", 0, 0, None)) == (0, None)
    assert shown.update(job("running", 1, 6, 40)) == (6, 40)
    assert shown.update(job("running", 2, 12, 30)) == (12, 40)
    assert shown.update(job("running", 2, 10, 55)) == (12, 55)
    assert shown.update(job("succeeded", 3, 30, 30)) == (30, 30)


def test_a_log_line_keeps_the_bar_s_position():
    polls = iter([job("running", 1, 6, 40), job("running", 2, 12, 20), job("succeeded", 3, 30, 30)])
    out = io.StringIO()
    follow(lambda: next(polls), Console(file=out, force_terminal=False, width=200), poll_s=0)
    lines = out.getvalue().splitlines()
    assert "round 2, 12/40 trials" in lines[1]


def test_elapsed_and_eta_fit_in_100_columns():
    """Issue 42: at 100 columns the live bar cut its elapsed time and ETA."""
    out = io.StringIO()
    polls = iter([job("running", 12, 130, 260, culprits=3)] * 2 + [job("succeeded", 20, 260, 260, 3)])
    follow(lambda: next(polls), Console(file=out, force_terminal=True, width=100, color_system=None), poll_s=0)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # the cursor moves of a live display
    drawn = [line for line in text.replace("\r", "\n").splitlines() if "job 7" in line]
    assert drawn
    for line in drawn:
        assert len(line) <= 100 and "ETA" in line
    assert "0:00:00" in drawn[-1] and "100%" in drawn[-1]


def test_a_build_is_its_own_phase_and_the_eta_counts_the_builds_still_expected():
    compiled = job("running", 2, 10, 40)
    # 10 trials in 160 s, 100 s of them building: 6 s a trial; 30 trials and 240 s of builds to go
    compiled.progress.update({"build_s_done": 100.0, "expected_build_s": 240.0,
                              "building": [{"sha": "3f2a1b9c0d11", "est_s": 240.0}, {"sha": "77aa", "est_s": 5.0}]})
    line = progress_line(compiled, elapsed_s=160)
    assert "round 2, building 3f2a1b (est. 4m) +1, 10/40 trials" in line
    assert line.endswith("2m40s elapsed, ETA 7m00s")  # 30 x 6 s + 240 s
    done = job("succeeded", 3, 30, 30)
    compiled.progress["building"] = [{"sha": "3f2a1b9c0d11", "est_s": 0.2}]  # a build that costs nothing
    assert "round 2, building 3f2a1b, 10/40 trials" in progress_line(compiled, elapsed_s=160)  # no "(est. 0s)"
    done.progress["building"] = [{"sha": "3f2a1b9c0d11", "est_s": 240.0}]
    assert "building" not in progress_line(done, elapsed_s=300)


def test_every_progress_form_counts_the_builds_still_expected():
    """Issue 45: the live bar's ETA and the API's `progress.eta_s` (the job page's ETA) are the
    log line's estimate: trials at the pace of those done with the build seconds left out, plus
    the builds still expected; rich's own remaining-time column counted trials only."""
    from datetime import timedelta

    from perfbisect.cli.follow import bar_eta
    from perfbisect.service.jobs.views import live_eta

    compiled = job("running", 2, 10, 40)
    compiled.progress.update({"build_s_done": 100.0, "expected_build_s": 240.0})
    assert bar_eta(compiled, 160.0, 10, 40) == "0:07:00"  # 30 x 6 s + 240 s, as the line says
    assert bar_eta(compiled, 160.0, 0, 40) == "-:--:--" and bar_eta(None, 0.0, 0, None) == "-:--:--"
    assert bar_eta(job("succeeded", 3, 30, 30), 300.0, 30, 30) == "0:00:00"
    started = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert live_eta(compiled.progress, started, now=started + timedelta(seconds=160)) == {"eta_s": 420.0}
    assert live_eta(compiled.progress, started.replace(tzinfo=None), now=started + timedelta(seconds=160)) == {
        "eta_s": 420.0}  # SQLite's naive UTC
    assert live_eta(compiled.progress, None) == {}  # not started
    assert live_eta({**compiled.progress, "trials": 0}, started) == {}  # no pace yet


def test_the_live_bar_draws_that_eta():
    from rich.progress import Progress

    from perfbisect.cli.follow import bar_columns, bar_detail, bar_eta

    compiled = job("running", 2, 10, 40)
    compiled.progress.update({"build_s_done": 100.0, "expected_build_s": 3600.0,
                              "building": [{"sha": "3f2a1b9c0d11", "est_s": 3600.0}]})
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    with Progress(*bar_columns(), console=console, auto_refresh=False) as bar:
        bar.add_task("job 7 running", total=40, completed=10, detail=bar_detail(compiled, 10, 40),
                     eta=bar_eta(compiled, 160.0, 10, 40))
        bar.refresh()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "ETA 1:03:00" in text  # 30 x 6 s of trials + an hour of builds; rich's column said 0:00:48 or so
    assert "building 3f2a1b (est. 60m)" in text
