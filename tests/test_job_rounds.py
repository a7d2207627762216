"""The job loop on the real PostgreSQL, with the harness's results fed in directly: advance_job's
round logic (trials planned, results stored, culprits written, cancel stops dispatch) without
subprocesses. The numbers are a literal step history, not a model of a kernel."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.jobs import advance, views
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import JobStatus, Trial, TrialStatus, utcnow
from perfbisect.service.trials import service as trials
from tests.factories import create_repository
from tests.gitrepo import make_repo

CASE_BIG = "gemm M=256,N=256,K=256,dtype=fp32"
CASE_SMALL = "gemm M=64,N=64,K=64,dtype=fp32"


def harness_result(ratios: dict[str, float], rng: random.Random, status: str = "ok", wrong: bool = False,
                   noise: float = 0.01, wrong_cases: frozenset[str] = frozenset(), control: float = 100.0) -> dict:
    cases = []
    for name, ratio in ratios.items():
        bad = wrong or name in wrong_cases
        value = ratio * rng.lognormvariate(0, noise)
        params = dict(kv.split("=") for kv in name.split(" ", 1)[1].split(","))
        params = {k: int(v) if v.isdigit() else v for k, v in params.items()}
        cases.append({
            "suite": "gemm", "target": "minikern.gemm:matmul", "params": params, "name": name,
            "status": "wrong_results" if bad else "ok",
            "error": "relative error 0.5 above tolerance 0.01" if bad else None,
            "median_ratio": value, "metric": {"name": "GFLOP/s", "higher_is_better": True,
                                              "target": 100 * value, "control": control},
            "target_ms": [1 / value], "control_ms": [1.0], "ratio": [value], "accuracy_error": 0.5 if bad else 1e-6,
        })
    return {"status": status, "error": None if status == "ok" else "ImportError: boom", "cases": cases if status == "ok" else [],
            "device": {"name": "test-cpu", "torch": "2.13"}, "harness_version": "1", "wall_s": 0.1}


def run_job(session, job_id: int, truth, max_rounds: int = 60) -> int:
    """Drive advance -> start -> record like the tasks do; return the number of rounds."""
    rng = random.Random(7)
    job = jobs.get(session, job_id)
    for round_number in range(max_rounds):
        trial_ids = advance.advance(session, job_id).trial_ids
        session.flush()
        if not trial_ids:
            return round_number
        for trial_id in trial_ids:
            work = trials.start(session, trial_id, worker_host="test")
            if work is None:
                continue
            index = job.revision_shas.index(work.sha)
            trials.record(session, trial_id, truth(index, rng), build_s=0.0)
    raise AssertionError("job did not finish")


@pytest.fixture
def repo(session, tmp_path: Path):
    path = tmp_path / "lib"
    make_repo(path, [f"change {i} (#{100 + i})" for i in range(17)])
    return create_repository(session, path, name="lib")


def submit(session, **kw) -> int:
    body = BisectCreate(repository="lib", good="HEAD~16", bad="main",
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32", "M=64,N=64,K=64,dtype=fp32"]}],
                        **kw)
    return jobs.create_bisect(session, body, SYSTEM).id


def test_two_steps_one_shape_only_are_both_named(session, repo) -> None:
    # Confirmed on all the pair's trials: the unchanged shape's noise (1%) sits at the detection
    # floor (2 x 1% = the 2% minimum effect), and judged on two side-by-side blocks alone its verdict
    # at the culprits stayed open (inconclusive) in 3 of 8 seeds, 1 of 8 this way. The side-by-side
    # path: tests/test_side_by_side_jobs.py.
    job_id = submit(session, side_by_side=False)

    def truth(i: int, rng: random.Random) -> dict:
        big = 1.0 * (0.8 if i >= 5 else 1.0) * (0.85 if i >= 12 else 1.0)
        return harness_result({CASE_BIG: big, CASE_SMALL: 1.0}, rng)

    rounds = run_job(session, job_id, truth)
    job = views.job_read(session, jobs.get(session, job_id))
    assert job.status == "succeeded", job.outcome.cases[1].reason
    named = [job.revision_shas.index(c.last_sha) for c in job.culprits if c.kind == "performance"]
    assert named == [5, 12]
    first = job.culprits[0]
    assert first.pr_number == 105 and first.exact
    assert first.effects[CASE_BIG].rel == pytest.approx(-0.2, abs=0.03)
    assert first.effects[CASE_BIG].before_value == pytest.approx(100, rel=0.05)
    # stored with the culprit and read back: the shape that moved is confirmed by its own verdict,
    # the one that did not is shown with its interval but never named (model.step_moved)
    assert first.effects[CASE_BIG].confirmed is True and first.effects[CASE_SMALL].confirmed is False
    assert job.progress["trials"] > 0 and job.progress["rounds"] == rounds


def test_unbuildable_and_wrong_results_are_reported(session, repo) -> None:
    job_id = submit(session)

    def truth(i: int, rng: random.Random) -> dict:
        if i in (7, 8):
            return harness_result({}, rng, status="import_error")
        return harness_result({CASE_BIG: 0.7 if i >= 8 else 1.0, CASE_SMALL: 1.0}, rng, wrong=i >= 13)

    run_job(session, job_id, truth)
    job = views.job_read(session, jobs.get(session, job_id))
    perf = [c for c in job.culprits if c.kind == "performance"]
    assert len(perf) == 1
    # 7 and 8 do not build, so 6 is the last good and 9 the first bad revision measured: the
    # step may be at 7, 8 or 9, and the culprit is that range, not the first buildable one.
    assert (job.revision_shas.index(perf[0].first_sha), job.revision_shas.index(perf[0].last_sha)) == (7, 9)
    assert not perf[0].exact
    wrong = [c for c in job.culprits if c.kind == "correctness"]
    assert [(job.revision_shas.index(c.first_sha), c.fixed_sha) for c in wrong] == [(13, None)]
    failed = session.scalars(select(Trial).where(Trial.job_id == job_id, Trial.status == TrialStatus.import_error)).all()
    assert failed and all(t.failure_reason == "ImportError: boom" for t in failed)


def test_progress_counts_the_search_ahead_from_the_first_round(session, repo) -> None:
    """The demo's bar read 100%, ETA 0 while its first round ran: the first round's trials were
    all the work it expected. From the first round on, the search the range still needs counts."""
    job_id = submit(session)
    first = advance.advance(session, job_id)
    progress = jobs.get(session, job_id).progress
    assert progress["planned"] == len(first.trial_ids) > 0
    # 17 revisions: at least a binary search of the 15 untried ones beyond this round's probes
    assert progress["expected_trials"] >= progress["planned"] + 2 * 2


def test_wrong_results_belong_to_the_case_that_was_wrong(session, repo) -> None:
    """Only the small gemm fails accuracy from revision 11 to the bad end; the big one steps at
    13. The big one keeps its timing verdict (its step is found through the wrong revisions),
    the correctness culprit names the small case with its error vs the tolerance, and the job
    decided every case: it succeeded."""
    job_id = submit(session)

    def truth(i: int, rng: random.Random) -> dict:
        return harness_result({CASE_BIG: 0.5 if i >= 13 else 1.0, CASE_SMALL: 1.0}, rng,
                              wrong_cases=frozenset({CASE_SMALL}) if i >= 11 else frozenset())

    run_job(session, job_id, truth)
    job = views.job_read(session, jobs.get(session, job_id))
    perf = [c for c in job.culprits if c.kind == "performance"]
    assert [(job.revision_shas.index(c.first_sha), sorted(c.effects)) for c in perf] == [(13, [CASE_BIG])]
    [wrong] = [c for c in job.culprits if c.kind == "correctness"]
    assert job.revision_shas.index(wrong.first_sha) == 11 and list(wrong.wrong_cases) == [CASE_SMALL]
    assert (wrong.wrong_cases[CASE_SMALL].error, wrong.wrong_cases[CASE_SMALL].tolerance) == (0.5, 0.01)
    outcomes = {c.case: c for c in job.outcome.cases}
    assert outcomes[CASE_BIG].outcome == "regressed" and outcomes[CASE_BIG].reason is None
    assert (outcomes[CASE_SMALL].outcome, outcomes[CASE_SMALL].reason) == ("regressed", "wrong results from revision 11")
    assert job.status == "succeeded", job.error


def test_a_worker_failing_every_trial_mid_job_ends_the_job_at_the_cap(session, repo) -> None:
    """CI saw a job plan 1976 rounds: once a worker broke, every trial it ran failed without a
    value at revisions that had run before, and those revisions were asked again every round.
    Here every trial from the 7th on fails: the job must still end, with no revision given more
    than the cap, and its outcome must say why it could not decide."""
    job_id = submit(session)
    ran = 0

    def truth(i: int, rng: random.Random) -> dict:
        nonlocal ran
        ran += 1
        if ran > 6:
            return harness_result({}, rng, status="error")
        return harness_result({CASE_BIG: 0.7 if i >= 8 else 1.0, CASE_SMALL: 1.0}, rng, noise=0.2)

    rounds = run_job(session, job_id, truth, max_rounds=200)
    job = jobs.get(session, job_id)
    assert job.status.finished and job.status != JobStatus.succeeded, (rounds, job.status, job.error)
    per_revision: dict[int, int] = {}
    for trial in session.scalars(select(Trial).where(Trial.job_id == job_id)):
        per_revision[trial.revision_id] = per_revision.get(trial.revision_id, 0) + 1
    assert max(per_revision.values()) <= job.spec.max_trials
    assert job.error.startswith("2 of 2 case(s) could not be decided"), job.error
    for case in job.result["outcome"]["cases"]:  # the failures, not the noise, named first
        assert case["outcome"] == "inconclusive" and "trials at revision" in case["reason"], case
        assert "failed without a value and its trial cap (12) was reached" in case["reason"], case
    assert any(f["reason"] == "error" for f in job.result["outcome"]["failures"])


def test_worker_failures_are_tried_again_and_never_make_a_revision_unbuildable(session, repo) -> None:
    """The first two trials of every revision fail on the worker (a checkout or sandbox
    failure): they say nothing of the revision, so it is tried again and the step is still
    named at its exact commit. A revision whose trials fail on the worker every time is
    skipped after WORKER_RETRIES and the outcome names the worker, not the revision."""
    job_id = submit(session)
    tries: dict[int, int] = {}

    def truth(i: int, rng: random.Random) -> dict:
        tries[i] = tries.get(i, 0) + 1
        if tries[i] <= 2 or i == 4:
            return {"status": "worker_error", "error": "checkout failed: cannot check out 0123abcd", "cases": []}
        return harness_result({CASE_BIG: 0.7 if i >= 8 else 1.0, CASE_SMALL: 1.0}, rng)

    run_job(session, job_id, truth, max_rounds=120)
    job = views.job_read(session, jobs.get(session, job_id))
    assert job.status == "succeeded", (job.status, job.error)
    perf = [c for c in job.culprits if c.kind == "performance"]
    assert [(job.revision_shas.index(c.first_sha), job.revision_shas.index(c.last_sha)) for c in perf] == [(8, 8)]
    assert tries[4] == advance.WORKER_RETRIES  # the search wanted it: tried that often, then skipped
    rows = session.scalars(select(Trial).where(Trial.job_id == job_id, Trial.status == TrialStatus.worker_error)).all()
    assert rows and all(t.failure_reason.startswith("checkout failed") for t in rows)
    assert {f.reason for f in job.outcome.failures} == {"worker_error"}


def test_cancel_stops_dispatch_and_late_results_are_ignored(session, repo) -> None:
    job_id = submit(session)
    trial_ids = advance.advance(session, job_id).trial_ids
    assert trial_ids
    jobs.cancel(session, job_id, SYSTEM)
    assert advance.advance(session, job_id).trial_ids == []
    assert trials.start(session, trial_ids[0]) is None
    statuses = {t.status for t in session.scalars(select(Trial).where(Trial.job_id == job_id))}
    assert statuses == {TrialStatus.cancelled}
    assert jobs.get(session, job_id).status == JobStatus.cancelled


def test_duplicate_delivery_keeps_the_first_result(session, repo) -> None:
    job_id = submit(session)
    trial_id = advance.advance(session, job_id).trial_ids[0]
    trials.start(session, trial_id)
    rng = random.Random(1)
    assert trials.record(session, trial_id, harness_result({CASE_BIG: 1.0, CASE_SMALL: 1.0}, rng)) is not None
    assert trials.record(session, trial_id, harness_result({CASE_BIG: 0.1, CASE_SMALL: 0.1}, rng)) is None
    trial = session.get(Trial, trial_id)
    assert trial.status == TrialStatus.ok
    assert trials.start(session, trial_id) is None  # a redelivered message finds the work done


def test_trial_left_running_by_a_dead_worker_runs_again(session, repo) -> None:
    job_id = submit(session)
    trial_id = advance.advance(session, job_id).trial_ids[0]
    first = trials.start(session, trial_id, worker_host="dead-node")
    assert trials.start(session, trial_id, worker_host="other-node") is None  # it still beats: a duplicate
    trial = session.get(Trial, trial_id)
    trial.heartbeat_at = trial.started_at = utcnow() - timedelta(minutes=5)  # it stopped beating
    again = trials.start(session, trial_id, worker_host="live-node")
    assert first is not None and again is not None and again.attempt == 2
    trial = session.get(Trial, trial_id)
    assert trial.attempts == 2 and trial.worker_host == "live-node"


def test_a_step_undone_inside_the_range_is_found_with_scan_and_said_without(session, repo) -> None:
    """Issue 28: equal ends hid a 20x slowdown that lasted a few commits. With --scan 3 the
    search sees it and names both the regression and its fix; without, the case is unchanged
    and its reason says a step inside would not have been seen."""

    def truth(i: int, rng: random.Random) -> dict:
        return harness_result({CASE_BIG: 0.05 if 6 <= i < 11 else 1.0, CASE_SMALL: 1.0}, rng)

    scanned = submit(session, scan=3, min_effect=0.05)
    run_job(session, scanned, truth)
    job = views.job_read(session, jobs.get(session, scanned))
    assert sorted(job.revision_shas.index(c.last_sha) for c in job.culprits) == [6, 11]
    assert job.spec.scan == 3

    blind = submit(session, scan=0, min_effect=0.05)
    run_job(session, blind, truth)
    job = views.job_read(session, jobs.get(session, blind))
    assert job.culprits == [] and job.outcome.cases[0].outcome == "unchanged"
    assert "only the ends were measured" in job.outcome.cases[0].reason
    assert [c.unseen for c in job.outcome.cases] == [15, 15]  # HEAD~16..main: 15 commits between
    # the reports link each such case's history, where a tracked branch measured every commit
    from perfbisect.service.reports.culprits import report_lines
    from perfbisect.service.reports.pr_comment import render_job

    text = "\n".join(str(line) for line in report_lines(job))
    assert f"history: /dashboard/repositories/lib?case={CASE_BIG.replace(' ', '%20').replace('=', '%3D').replace(',', '%2C')}" in text
    md = render_job(job, "https://perf.example.com/")
    assert ("Unchanged covers what was measured: a step undone within 16 consecutive commits "
            f"(`{job.revision_shas[0][:10]}..{job.revision_shas[-1][:10]}`, 15 not measured) would not be seen") in md
    assert job.outcome.gap is not None and job.outcome.gap.commits == 16

    # issue 46: --scan auto stored like scan, its points sized to max_gap (4, 8, 12 of 0..16)
    auto = submit(session, scan="auto", max_gap=4, min_effect=0.05)
    run_job(session, auto, truth)
    job = views.job_read(session, jobs.get(session, auto))
    assert job.spec.scan == "auto" and job.spec.max_gap == 4
    assert sorted(job.revision_shas.index(c.last_sha) for c in job.culprits) == [6, 11]
    assert f"[{CASE_BIG}](https://perf.example.com/dashboard/repositories/lib?case=" in md


def test_scan_auto_scans_where_a_tracked_history_of_the_range_moved(session, repo) -> None:
    """Issue 46: an earlier job measured every revision of HEAD~16..main (as a tracked history
    does) and saw CASE_BIG slow at 6 and 7 only. --scan auto --max-gap 8 alone would measure 8
    (fast) and miss it; with the history's edges (6, 8) among its points it names both edges."""

    def truth(i: int, rng: random.Random) -> dict:
        return harness_result({CASE_BIG: 0.5 if 6 <= i < 8 else 1.0, CASE_SMALL: 1.0}, rng)

    run_job(session, submit(session, scan=15, min_effect=0.05), truth)  # every revision has a case point
    auto = submit(session, scan="auto", max_gap=8, min_effect=0.05)
    job = jobs.get(session, auto)
    assert advance.scan_hints(session, job) == (6, 8)
    run_job(session, auto, truth)
    session.expire_all()  # the job was read before its culprits were written
    job = views.job_read(session, jobs.get(session, auto))
    assert sorted(job.revision_shas.index(c.last_sha) for c in job.culprits) == [6, 8]


@pytest.fixture
def pauses(monkeypatch):
    """The production pauses for a steadier machine (the test session turns them off)."""
    from perfbisect.service.settings import get_settings

    monkeypatch.setenv("PERFBISECT_UNSTEADY_PAUSE_S", "60")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_an_unsteady_control_holds_the_rounds_back_and_the_report_says_so(session, repo, pauses) -> None:
    """The control swings 10% from trial to trial (a co-tenant), far beyond what a 2% minimum
    effect allows: the rounds after the ends are held back 60, 120 and 240 s, then the job gives up
    waiting and measures on, and its outcome says how long it waited and why."""
    job_id = submit(session)
    swings = iter([100.0, 110.0, 95.0, 105.0] * 100)

    def truth(i: int, rng: random.Random) -> dict:
        return harness_result({CASE_BIG: 0.8 if i >= 5 else 1.0, CASE_SMALL: 1.0}, rng, control=next(swings))

    countdowns = []
    rng = random.Random(7)
    job = jobs.get(session, job_id)
    while True:
        planned = advance.advance(session, job_id)
        session.flush()
        if not planned.trial_ids:
            break
        countdowns.append(planned.countdown)
        held = session.scalars(select(Trial).where(Trial.id.in_(planned.trial_ids))).all()
        assert all(t.dispatched_at >= utcnow() + timedelta(seconds=planned.countdown - 5) for t in held)
        for trial_id in planned.trial_ids:
            work = trials.start(session, trial_id, worker_host="test")
            trials.record(session, trial_id, truth(job.revision_shas.index(work.sha), rng), build_s=0.0)
    assert [c for c in countdowns if c] == [60, 120, 240]
    assert countdowns[0] == 0  # the ends: nothing measured yet
    read = views.job_read(session, jobs.get(session, job_id))
    assert read.outcome.waited_s == 420
    assert "waited 420 s in 3 pauses for a steadier machine: the control's own spread on" in read.outcome.warning
    assert "it stayed unsteady, so the job measured on" in read.outcome.warning
    assert [w["pause_s"] for w in read.progress["waits"]] == [60, 120, 240, 0]


def test_a_steady_control_never_waits(session, repo, pauses) -> None:
    job_id = submit(session)
    run_job(session, job_id, lambda i, rng: harness_result({CASE_BIG: 0.8 if i >= 5 else 1.0, CASE_SMALL: 1.0}, rng))
    read = views.job_read(session, jobs.get(session, job_id))
    assert read.outcome.waited_s == 0 and read.progress["waits"] == []


def test_an_embedded_send_with_a_countdown_is_held_until_it_is_due(monkeypatch) -> None:
    """Without a broker the round's trials wait in this process: held, counted as queued (the
    reconciler must not send them again), and released to the queue once due."""
    import time
    from collections import deque
    from types import SimpleNamespace

    from perfbisect import dispatch
    from perfbisect.queue import RUN_TRIAL

    monkeypatch.setattr(dispatch, "get_settings", lambda: SimpleNamespace(embedded=True))
    monkeypatch.setattr(dispatch, "_pending", deque())
    monkeypatch.setattr(dispatch, "_held", [])
    dispatch.send(RUN_TRIAL, 7, queue="cpu", countdown=0.3)
    dispatch.send(RUN_TRIAL, 8, queue="cpu")
    assert dispatch._take(10) == [(RUN_TRIAL, (8,))]
    assert dispatch.queued_probe()(7, "cpu") and not dispatch.idle()
    assert dispatch._take(10) == []
    time.sleep(0.35)
    assert dispatch._take(10) == [(RUN_TRIAL, (7,))]
    assert not dispatch._held


@pytest.mark.parametrize("check_accuracy", [False, True])  # True: accuracy-only sweep trials run beside the rounds
def test_trials_measured_while_a_co_tenant_ran_are_set_aside_once_the_machine_is_steady(session, repo, pauses,
                                                                                         check_accuracy) -> None:
    """A co-tenant for the job's first 12 trials: the control swings 40% and the target's ratio
    30% (they are not hit alike). The job pauses; once the control is steady again, those trials
    are set aside, so the ends are measured again instead of holding the trial cap with that noise,
    and the 20% step is named where it is (the twelfth session's Liger run on an H200 beside a
    co-tenant ended inconclusive at the cap instead)."""
    job_id = submit(session, check_accuracy=check_accuracy)
    finished = 0

    def truth(i: int, rng: random.Random) -> dict:
        nonlocal finished
        finished += 1
        ratios = {CASE_BIG: 0.8 if i >= 5 else 1.0, CASE_SMALL: 1.0}
        if finished <= 12:
            return harness_result(ratios, rng, noise=0.3, control=100.0 * rng.lognormvariate(0, 0.4))
        return harness_result(ratios, rng)

    run_job(session, job_id, truth)
    read = views.job_read(session, jobs.get(session, job_id))
    assert [(c.first_sha, c.exact) for c in read.culprits] == [(jobs.get(session, job_id).revision_shas[5], True)]
    waits = read.progress["waits"]
    assert waits and waits[-1]["pause_s"] > 0  # it paused and never gave up: steady again
    assert read.progress["set_aside"] >= (4 if check_accuracy else 8) and read.outcome.set_aside == read.progress["set_aside"]
    assert f"so the {read.outcome.set_aside} trials measured while it was not were set aside" in read.outcome.warning
