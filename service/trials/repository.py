"""SQL for the reconciler: trials and jobs that look in flight but may have been forgotten."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from service.models import Job, JobStatus, Trial, TrialStatus

OPEN_JOBS = (JobStatus.queued, JobStatus.running)


def running_trials(session: Session) -> Sequence[Trial]:
    """Running trials of open jobs, locked (a worker's start() or record() waits for the repair),
    skipping rows another reconciler holds."""
    stmt = (select(Trial).join(Job, Job.id == Trial.job_id)
            .where(Trial.status == TrialStatus.running, Job.status.in_(OPEN_JOBS))
            .with_for_update(of=Trial, skip_locked=True))
    return session.scalars(stmt).all()


def pending_trials_sent_before(session: Session, before: datetime) -> Sequence[Trial]:
    """Pending trials of open jobs whose message went out before `before` (or never)."""
    stmt = (select(Trial).join(Job, Job.id == Trial.job_id)
            .where(Trial.status == TrialStatus.pending, Job.status.in_(OPEN_JOBS),
                   (Trial.dispatched_at.is_(None)) | (Trial.dispatched_at < before))
            .order_by(Trial.id).with_for_update(of=Trial, skip_locked=True))
    return session.scalars(stmt).all()


def stalled_jobs(session: Session, quiet_since: datetime) -> Sequence[int]:
    """Open jobs with no trial in flight and nothing happening since `quiet_since`: created
    before it, and no trial of theirs finished after it."""
    in_flight = exists().where(Trial.job_id == Job.id, Trial.status.in_((TrialStatus.pending, TrialStatus.running)))
    recent = exists().where(Trial.job_id == Job.id, func.coalesce(Trial.finished_at, Trial.created_at) >= quiet_since)
    stmt = (select(Job.id).where(Job.status.in_(OPEN_JOBS), Job.created_at < quiet_since, ~in_flight, ~recent)
            .order_by(Job.id))
    return session.scalars(stmt).all()
