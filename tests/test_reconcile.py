"""The reconciler and the worker's ownership of a trial, on the real database: what the broker
or a dead worker lost is found again, what is alive or still queued is left alone."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.jobs import advance
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import JobStatus, Trial, TrialStatus, utcnow
from perfbisect.service.trials import reconcile as reconciler
from perfbisect.service.trials import service as trials
from tests.factories import create_repository
from tests.gitrepo import make_repo

LONG_AGO = timedelta(minutes=10)


def nothing_queued(_trial_id: int, _queue: str) -> bool:
    return False


@pytest.fixture
def job_id(session, tmp_path: Path) -> int:
    make_repo(tmp_path / "lib", [f"change {i}" for i in range(9)])
    create_repository(session, tmp_path / "lib", name="lib")
    body = BisectCreate(repository="lib", good="HEAD~8", bad="main", workers=2,
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=64,N=64,K=64,dtype=fp32"]}])
    return jobs.create_bisect(session, body, SYSTEM).id


def first_round(session, job_id: int) -> list[Trial]:
    ids = advance.advance(session, job_id).trial_ids
    assert len(ids) >= 2
    return [session.get(Trial, i) for i in ids]


def test_a_running_trial_whose_worker_stopped_beating_is_sent_again(session, job_id) -> None:
    dead, alive, *_ = first_round(session, job_id)
    trials.start(session, dead.id, worker_host="dead")
    trials.start(session, alive.id, worker_host="alive")
    dead.heartbeat_at = utcnow() - LONG_AGO
    repairs = reconciler.reconcile(session, nothing_queued)
    assert repairs.revived == [dead.id] and (dead.id, "cpu") in repairs.trials
    assert dead.status == TrialStatus.pending and alive.status == TrialStatus.running
    # The dead worker's late result is dropped once a new attempt owns the trial.
    work = trials.start(session, dead.id, worker_host="new")
    assert work is not None and work.attempt == 2
    assert trials.record(session, dead.id, {"status": "error", "error": "late", "cases": []}, attempt=1) is None
    assert trials.check_in(session, dead.id, 1, beat=True) is False
    assert trials.check_in(session, dead.id, 2, beat=True) is True


def test_a_pending_trial_is_sent_again_only_when_its_message_is_gone(session, job_id) -> None:
    lost, waiting, *_ = first_round(session, job_id)
    for trial in (lost, waiting):
        trial.dispatched_at = utcnow() - LONG_AGO
    queued = lambda trial_id, _queue: trial_id == waiting.id  # noqa: E731
    repairs = reconciler.reconcile(session, queued)
    assert [t for t, _ in repairs.trials] == [lost.id] and repairs.jobs == []
    assert lost.dispatched_at > utcnow() - timedelta(minutes=1)  # sent now: not again at the next pass
    assert [t for t, _ in reconciler.reconcile(session, queued).trials] == []


def test_a_recent_pending_trial_is_left_alone(session, job_id) -> None:
    first_round(session, job_id)
    assert not reconciler.reconcile(session, nothing_queued)


def test_a_job_whose_planning_message_was_lost_is_advanced_again(session, job_id) -> None:
    job = jobs.get(session, job_id)
    assert not reconciler.reconcile(session, nothing_queued)  # just created: its message may be on the way
    job.created_at = utcnow() - LONG_AGO
    assert reconciler.reconcile(session, nothing_queued).jobs == [job_id]
    first_round(session, job_id)  # once it has trials in flight it is not stalled
    assert reconciler.reconcile(session, nothing_queued).jobs == []


def test_a_cancelled_job_stops_its_running_trial_and_is_not_repaired(session, job_id) -> None:
    trial, *_ = first_round(session, job_id)
    work = trials.start(session, trial.id)
    trial.heartbeat_at = utcnow() - LONG_AGO
    jobs.cancel(session, job_id, SYSTEM)
    assert trials.check_in(session, trial.id, work.attempt, beat=True) is False
    assert not reconciler.reconcile(session, nothing_queued)
    assert jobs.get(session, job_id).status == JobStatus.cancelled


def test_the_reconciler_runs_on_sqlite_with_a_running_trial(tmp_path: Path) -> None:
    """Embedded `serve` keeps its state in SQLite, which stores no UTC offset: every timestamp
    read back must still be aware UTC (one rule on both databases), or the reconciler's
    `now - heartbeat_at` raises TypeError and each self-healing pass aborts."""
    from sqlalchemy.orm import Session

    from perfbisect.service.db import make_engine
    from perfbisect.service.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'embedded.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    make_repo(tmp_path / "lib", [f"change {i}" for i in range(5)])
    with Session(engine) as session:
        create_repository(session, tmp_path / "lib", name="lib")
        body = BisectCreate(repository="lib", good="HEAD~4", bad="main", workers=2,
                            benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                         "shapes": ["M=64,N=64,K=64,dtype=fp32"]}])
        job_id = jobs.create_bisect(session, body, SYSTEM).id
        dead, alive, *_ = first_round(session, job_id)
        trials.start(session, dead.id, worker_host="dead")
        trials.start(session, alive.id, worker_host="alive")
        dead.heartbeat_at = utcnow() - LONG_AGO
        session.commit()
        dead_id, alive_id = dead.id, alive.id
    with Session(engine) as session:  # read back from the file: what the embedded reconciler sees
        trial = session.get(Trial, alive_id)
        assert trial.heartbeat_at.utcoffset() == timedelta(0) and trial.created_at.utcoffset() == timedelta(0)
        repairs = reconciler.reconcile(session, nothing_queued)
        assert repairs.revived == [dead_id]
        assert session.get(Trial, alive_id).status == TrialStatus.running
    engine.dispose()
