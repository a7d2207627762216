"""SQL about trials: their stored results (raw samples, per-revision case points) and, for the
reconciler, the trials and jobs that look in flight but may have been forgotten."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from perfbisect.service.models import (
    CasePoint,
    Job,
    JobStatus,
    Measurement,
    MeasurementSamples,
    Revision,
    Trial,
    TrialStatus,
)

OPEN_JOBS = (JobStatus.queued, JobStatus.running)


def running_trials(session: Session) -> Sequence[Trial]:
    """Running unpaired trials of open jobs, locked (a worker's start() or record() waits for the
    repair), skipping rows another reconciler holds."""
    stmt = (select(Trial).join(Job, Job.id == Trial.job_id)
            .where(Trial.status == TrialStatus.running, Trial.block.is_(None), Job.status.in_(OPEN_JOBS))
            .with_for_update(of=Trial, skip_locked=True))
    return session.scalars(stmt).all()


def pending_trials_sent_before(session: Session, before: datetime) -> Sequence[Trial]:
    """Pending unpaired trials of open jobs whose message went out before `before` (or never)."""
    stmt = (select(Trial).join(Job, Job.id == Trial.job_id)
            .where(Trial.status == TrialStatus.pending, Trial.block.is_(None), Job.status.in_(OPEN_JOBS),
                   (Trial.dispatched_at.is_(None)) | (Trial.dispatched_at < before))
            .order_by(Trial.id).with_for_update(of=Trial, skip_locked=True))
    return session.scalars(stmt).all()


def unfinished_block_trials(session: Session) -> Sequence[Trial]:
    """Pending or running trials of side-by-side blocks of open jobs, in block order, locked
    (skipping rows another reconciler or a claiming worker holds)."""
    stmt = (select(Trial).join(Job, Job.id == Trial.job_id)
            .where(Trial.block.is_not(None), Trial.status.in_((TrialStatus.pending, TrialStatus.running)),
                   Job.status.in_(OPEN_JOBS))
            .order_by(Trial.job_id, Trial.block, Trial.block_slot).with_for_update(of=Trial, skip_locked=True))
    return session.scalars(stmt).all()


def stalled_jobs(session: Session, quiet_since: datetime) -> Sequence[int]:
    """Open jobs with no trial in flight and nothing happening since `quiet_since`: created
    before it, and no trial of theirs finished after it."""
    in_flight = exists().where(Trial.job_id == Job.id, Trial.status.in_((TrialStatus.pending, TrialStatus.running)))
    recent = exists().where(Trial.job_id == Job.id, func.coalesce(Trial.finished_at, Trial.created_at) >= quiet_since)
    stmt = (select(Job.id).where(Job.status.in_(OPEN_JOBS), Job.created_at < quiet_since, ~in_flight, ~recent)
            .order_by(Job.id))
    return session.scalars(stmt).all()


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def refresh_case_points(session: Session, trial: Trial, case_ids: Sequence[int]) -> None:
    """Recompute the medians of (case, revision, fingerprint) over the ok trials for the cases
    `trial` just stored. The revision row is locked so two trials of one revision finishing at
    once cannot each write a median that misses the other's measurement."""
    if trial.status != TrialStatus.ok or not case_ids or trial.variant:
        return  # a variant (culprits reverted) is not the commit: it has no place in its history
    revision = session.get_one(Revision, trial.revision_id, with_for_update=True)
    fingerprint = trial.fingerprint or ""
    stmt = (select(Measurement.case_id, Measurement.value, Measurement.control_value, Measurement.ratio,
                   Measurement.unit, Measurement.higher_is_better)
            .join(Trial, Measurement.trial_id == Trial.id)
            .where(Trial.revision_id == revision.id, Trial.status == TrialStatus.ok, Trial.variant.is_(None),
                   func.coalesce(Trial.fingerprint, "") == fingerprint, Measurement.case_id.in_(list(case_ids)),
                   Measurement.status == "ok", Measurement.value.is_not(None)))
    by_case: dict[int, list] = defaultdict(list)
    for row in session.execute(stmt):
        by_case[row.case_id].append(row)
    existing = {p.case_id: p for p in session.scalars(select(CasePoint).where(
        CasePoint.revision_id == revision.id, CasePoint.fingerprint == fingerprint,
        CasePoint.case_id.in_(list(by_case))))}
    for case_id, rows in by_case.items():
        point = existing.get(case_id) or CasePoint(case_id=case_id, revision_id=revision.id, fingerprint=fingerprint)
        point.position = revision.position
        point.trials = len(rows)
        point.value = _median(r.value for r in rows)
        point.control_value = _median(r.control_value for r in rows)
        point.ratio = _median(r.ratio for r in rows)
        point.value_min, point.value_max = _spread(r.value for r in rows)
        point.ratio_min, point.ratio_max = _spread(r.ratio for r in rows)
        point.unit, point.higher_is_better = rows[0].unit, rows[0].higher_is_better
        session.add(point)


def _spread(values) -> tuple[float | None, float | None]:
    present = [v for v in values if v is not None]
    return (min(present), max(present)) if present else (None, None)


def samples_of(session: Session, measurement_ids: Sequence[int]) -> dict[int, dict]:
    """measurement id -> its raw samples (only when a reader asked for them)."""
    stmt = select(MeasurementSamples).where(MeasurementSamples.measurement_id.in_(list(measurement_ids)))
    return {row.measurement_id: row.samples for row in session.scalars(stmt)}
