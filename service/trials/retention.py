"""Retention of raw samples: the per-sample times, ratios and clocks of a measurement are most of
its bytes (about 1.7 KB of the 1.8 KB, bench/scale.py) and are read only when someone asks for a
trial's samples. Past `samples_retention_days` they are deleted, in batches of trials, once the
trial's job has finished; the summaries (the measurement rows, the case points every history
reads, the job's stored outcome) are kept forever.

Flushes only: the caller owns each batch's transaction (workers/tasks.py commits one per batch,
so an interrupted run keeps what it pruned and the next run goes on from there).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from perfbisect.service.models import Job, JobStatus, Measurement, MeasurementSamples, Trial, utcnow

BATCH_TRIALS = 500  # trials per batch: about 25,000 sample rows with 50 cases each
FINISHED = [s for s in JobStatus if s.finished]


@dataclass(frozen=True)
class Pruned:
    trials: int
    samples: int  # measurement_samples rows deleted (or, dry, that would be)


def cutoff(days: int, now: datetime | None = None) -> datetime:
    """Trials finished before this lose their raw samples. Raises ValueError for days < 1."""
    if days < 1:
        raise ValueError("a retention of at least one day")
    return (now or utcnow()) - timedelta(days=days)


def _due(before: datetime):
    """Trials whose samples are due: finished before `before`, of a finished job, not pruned yet."""
    return (select(Trial.id).join(Job, Job.id == Trial.job_id)
            .where(Trial.samples_pruned_at.is_(None), Trial.finished_at < before, Job.status.in_(FINISHED)))


def prune_batch(session: Session, before: datetime, limit: int = BATCH_TRIALS) -> Pruned:
    """Delete the raw samples of at most `limit` due trials (oldest ids first) and mark them."""
    ids = list(session.scalars(_due(before).order_by(Trial.id).limit(limit)))
    if not ids:
        return Pruned(0, 0)
    measured = select(Measurement.id).where(Measurement.trial_id.in_(ids))
    deleted = session.execute(delete(MeasurementSamples).where(MeasurementSamples.measurement_id.in_(measured)))
    session.execute(update(Trial).where(Trial.id.in_(ids)).values(samples_pruned_at=utcnow()))
    session.flush()
    return Pruned(len(ids), deleted.rowcount)


def due(session: Session, before: datetime) -> Pruned:
    """What a prune would delete now (a dry run)."""
    trials = _due(before).subquery()
    samples = (select(func.count()).select_from(MeasurementSamples)
               .join(Measurement, Measurement.id == MeasurementSamples.measurement_id)
               .where(Measurement.trial_id.in_(select(trials.c.id))))
    return Pruned(session.scalar(select(func.count()).select_from(trials)) or 0, session.scalar(samples) or 0)
