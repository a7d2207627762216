"""Schedule and poll triggers in the embedded server (no broker, no Celery beat): its upkeep
looks for due branches like beat does, and a tracked branch says when it ran and runs next."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from perfbisect import dispatch
from perfbisect.queue import TRACK_BRANCH
from perfbisect.service.models import utcnow
from perfbisect.service.tracking import service as tracking
from perfbisect.service.tracking.schemas import TrackedBranchCreate
from tests.factories import create_repository
from tests.gitrepo import make_repo
from tests.test_cli_outcomes import embedded  # noqa: F401

CASE = {"suite": "gemm", "target": "lib.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}


def test_the_embedded_upkeep_runs_due_poll_and_schedule_branches(embedded, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    from perfbisect.service.db import session_scope

    monkeypatch.setattr(dispatch, "drain_in_background", lambda: None)  # look at what is queued, run nothing
    make_repo(tmp_path / "lib", [f"change {i}" for i in range(3)])
    with session_scope() as session:
        create_repository(session, tmp_path / "lib", name="lib")
        ids = {trigger: tracking.create(session, TrackedBranchCreate(
            repository="lib", benchmarks=[CASE], trigger=trigger, interval_s=60, start=False,
            device_class=f"dev-{trigger}")).id for trigger in ("poll", "schedule", "push")}
    dispatch._pending.clear()
    last_run = dispatch.embedded_upkeep({})
    queued = [(args[0], args[2]) for task, args, _q in dispatch._pending if task == TRACK_BRANCH]
    assert sorted(queued) == sorted([(ids["poll"], True), (ids["schedule"], False)])
    assert dispatch.POLL_TRACKED_BRANCHES in last_run
    dispatch._pending.clear()
    dispatch.embedded_upkeep(last_run)  # the next pass within the minute does not look again
    assert not [t for t, _a, _q in dispatch._pending if t == TRACK_BRANCH]


def test_a_tracked_branch_shows_its_last_and_next_run(embedded, tmp_path: Path) -> None:  # noqa: F811
    from perfbisect.service.db import session_scope

    make_repo(tmp_path / "lib", [f"change {i}" for i in range(3)])
    with session_scope() as session:
        create_repository(session, tmp_path / "lib", name="lib")
        polled = tracking.create(session, TrackedBranchCreate(repository="lib", benchmarks=[CASE], trigger="poll",
                                                              interval_s=600, start=False))
        pushed = tracking.create(session, TrackedBranchCreate(repository="lib", benchmarks=[CASE], start=False,
                                                              device_class="cuda"))
        polled_id = polled.id
        assert tracking.read(polled).next_run_at == polled.created_at  # due at once
        assert tracking.read(pushed).next_run_at is None
        tracking.start_run(session, polled_id, only_if_moved=True)
    with session_scope() as session:  # read back from SQLite: aware UTC, due one interval later
        shown = tracking.read(tracking.get(session, polled_id))
        assert shown.last_run_at is not None and shown.next_run_at == shown.last_run_at + timedelta(seconds=600)
        assert tracking.due(session, utcnow()) == []
        assert tracking.due(session, utcnow() + timedelta(seconds=601)) == [(polled_id, True)]
