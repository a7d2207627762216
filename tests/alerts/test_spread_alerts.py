"""Spread and mode alerts on a tracked branch (issue 46): the pure detector on literal per-call
series, then the loop on real PostgreSQL and git: a head whose calls gained a slow mode raises a
`bimodal` alert of its own (never a speed step's), notified through the one renderer, triaged like
any other. The harness is the edge: trials get stored results with known per-call times."""

from __future__ import annotations

from sqlalchemy import select

from perfbisect.service.alerts import service as alerts
from perfbisect.service.alerts.render import CaseStep, case_table
from perfbisect.service.alerts.schemas import AlertUpdate
from perfbisect.service.alerts.spread import Head, spread_steps
from perfbisect.service.bisect.model import BisectConfig
from perfbisect.service.models import Alert, AlertStatus
from perfbisect.service.notifications import service as notifications
from perfbisect.service.notifications.models import Delivery
from perfbisect.service.tracking import service as tracking
from tests.alerts.test_loop_service import CASE_NAME, lib, measure, track  # noqa: F401 (lib: a fixture)
from tests.gitrepo import git
from tests.test_notifications import subscribe

CONFIG = BisectConfig()
LEVEL = 0.001
LATTICE = (-0.02, -0.01, 0.0, 0.01, 0.02)  # a quiet trial's calls around 1 ms


def quiet(width: float = 1.0) -> tuple[float, ...]:
    """20 calls spread over a lattice `width` times the quiet one's."""
    return tuple(1.0 + width * LATTICE[(7 * k) % 5] for k in range(20))


def slow_path() -> tuple[float, ...]:
    """The quiet calls with every fourth twice as slow: a second mode of a quarter of the calls."""
    return tuple(2.0 if k % 4 == 3 else v for k, v in enumerate(quiet()))


def heads(series: list[tuple[float, ...]], control: list[tuple[float, ...]] | None = None) -> list[Head]:
    return [Head(2 * i, (s,), ((control or [quiet()] * len(series))[i],)) for i, s in enumerate(series)]


def test_a_slow_path_on_a_quarter_of_the_calls_is_one_bimodal_step_at_its_first_head() -> None:
    [step] = spread_steps("c", heads([quiet()] * 5 + [slow_path()] * 4), LEVEL, CONFIG)
    assert (step.case, step.before, step.after, step.finding.kind) == ("c", 8, 10, "bimodal")
    assert round(step.finding.mode_share, 2) == 0.25 and round(step.finding.mode_location, 1) == 1.0


def test_a_wider_body_of_calls_is_a_noisier_step() -> None:
    [step] = spread_steps("c", heads([quiet()] * 4 + [quiet(4.0)] * 3), LEVEL, CONFIG)
    assert (step.before, step.after, step.finding.kind) == (6, 8, "noisier")
    assert step.finding.ratio_ci[0] > 1.0 and round(step.finding.ratio) == 4


def test_no_step_without_three_heads_on_each_side_on_a_quiet_history_or_when_the_control_moved_too() -> None:
    assert spread_steps("c", heads([quiet()] * 5 + [slow_path()] * 2), LEVEL, CONFIG) == []
    assert spread_steps("c", heads([quiet()] * 2 + [slow_path()] * 4), LEVEL, CONFIG) == []
    assert spread_steps("c", heads([quiet()] * 10), LEVEL, CONFIG) == []
    noisy = [quiet()] * 4 + [quiet(4.0)] * 3
    assert spread_steps("c", heads(noisy, control=noisy), LEVEL, CONFIG) == []  # the machine, not the kernel
    assert spread_steps("c", heads(noisy), LEVEL, BisectConfig(spread_ratio=0)) == []  # turned off


def test_the_renderer_says_a_spread_step_as_a_spread() -> None:
    rows = case_table([CaseStep("c", 1.5, 0.01, 0.025, 1e-6, "noisier")], "ratio", {})
    assert rows[-1] == "| `c` | calls noisier: spread 1.0% → 2.5% | – | x2.50 (p=1e-06) |"


# --- the loop on PostgreSQL ---------------------------------------------------------------------


def calls_result(calls: tuple[float, ...]) -> dict:
    """A harness result of this module's case with its per-call times (target and control)."""
    case = {"suite": "gemm", "target": "lib.gemm:matmul", "name": CASE_NAME, "params": {}, "status": "ok",
            "median_ratio": 1.0, "target_ms": list(calls), "control_ms": list(quiet()),
            "metric": {"name": "TFLOP/s", "higher_is_better": True, "target": 1.0, "control": 1.0}}
    return {"status": "ok", "harness_version": "1", "device": {"name": "test-cpu", "torch": "2.13"},
            "cases": [case], "wall_s": 1.0}


def test_a_tracked_head_that_gains_a_slow_mode_raises_one_bimodal_alert_notified_and_triaged(session, lib) -> None:  # noqa: F811
    shas, name = lib["shas"], lib["repo"].name
    subscription = subscribe(session, name, "webhook", "https://hooks.example/x", ["alert"])
    calls = lambda sha: slow_path() if shas.index(sha) >= 10 else quiet()  # noqa: E731
    tracked = track(session, lib)
    measure(session, tracking.start_run(session, tracked.id).job.id, calls, as_result=calls_result)
    for index in (9, 11, 13):
        push_calls(session, lib, tracked, index, calls)
    assert alerts.detect(session, tracked.id).raised == []  # two heads after the step: not yet
    push_calls(session, lib, tracked, 15, calls)
    found = alerts.detect(session, tracked.id)
    [alert] = session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)).all()
    assert found.raised == [alert.id]
    assert (alert.kind.value, alert.status) == ("bimodal", AlertStatus.new)
    assert (alert.before_sha, alert.first_sha, alert.last_sha) == (shas[9], shas[10], shas[11])
    assert alert.bisect_job_id is not None  # two commits: bisected like a speed step's range, its culprit below

    [delivery_id] = notifications.alerts_raised(session, found.raised)
    delivery = session.get(Delivery, delivery_id)
    assert delivery.subscription_id == subscription.id
    assert delivery.payload["alert"]["kind"] == "bimodal"
    assert delivery.payload["title"].startswith(f"perfbisect: bimodal on {name}@main")
    [line] = delivery.payload["lines"]
    assert line.startswith(f"{CASE_NAME}: calls bimodal (a second mode), spread ")

    measure(session, alert.bisect_job_id, calls, as_result=calls_result)  # the bisect, on the same calls
    assert alerts.job_finished(session, alert.bisect_job_id) is not None
    assert (alert.culprit_first_sha, alert.culprit_last_sha) == (shas[10], shas[10])

    again = alerts.detect(session, tracked.id)
    assert again.raised == [] and len(session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)).all()) == 1
    alerts.triage(session, alert.id, AlertUpdate(status="acknowledged", reason="the self-check is on purpose"), "tester")
    assert session.get(Alert, alert.id).status == AlertStatus.acknowledged


def push_calls(session, lib, tracked, index: int, calls):
    """Push the branch to `index` and measure its head with per-call times."""
    git(lib["path"], "update-ref", "refs/heads/main", lib["shas"][index])
    run = tracking.start_run(session, tracked.id, lib["shas"][index])
    if run.job is not None:
        measure(session, run.job.id, calls, as_result=calls_result)
    return run
