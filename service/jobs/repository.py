"""All SQL about jobs, their trials and culprits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from service.models import Case, Job, JobStatus, Measurement, Trial, TrialStatus

IN_FLIGHT = (TrialStatus.pending, TrialStatus.running)


def get_job(session: Session, job_id: int, *, lock: bool = False) -> Job | None:
    stmt = select(Job).where(Job.id == job_id).options(selectinload(Job.repository), selectinload(Job.culprits))
    if lock:
        stmt = stmt.with_for_update(of=Job)
    return session.scalars(stmt).one_or_none()


def list_jobs(session: Session, *, status: JobStatus | None = None, limit: int = 100) -> Sequence[Job]:
    stmt = select(Job).options(selectinload(Job.repository), selectinload(Job.culprits))
    if status is not None:
        stmt = stmt.where(Job.status == status)
    return session.scalars(stmt.order_by(Job.id.desc()).limit(limit)).all()


def count_in_flight(session: Session, job_id: int, *, accuracy_only: bool | None = None) -> int:
    """Pending or running trials of the job (only sweep or only timed ones, when asked)."""
    stmt = select(func.count()).select_from(Trial).where(Trial.job_id == job_id, Trial.status.in_(IN_FLIGHT))
    if accuracy_only is not None:
        stmt = stmt.where(Trial.accuracy_only == accuracy_only)
    return session.scalar(stmt) or 0


def count_finished(session: Session, job_id: int) -> int:
    """Trials that ran to a result (cancelled ones are not work done)."""
    stmt = select(func.count()).select_from(Trial).where(
        Trial.job_id == job_id, Trial.status.not_in((*IN_FLIGHT, TrialStatus.cancelled)))
    return session.scalar(stmt) or 0


def trials_of(session: Session, job_id: int) -> Sequence[Trial]:
    stmt = (
        select(Trial)
        .where(Trial.job_id == job_id)
        .options(selectinload(Trial.revision), selectinload(Trial.measurements).selectinload(Measurement.case))
        .order_by(Trial.id)
    )
    return session.scalars(stmt).all()


def cancel_in_flight(session: Session, job_id: int) -> None:
    for trial in session.scalars(select(Trial).where(Trial.job_id == job_id, Trial.status == TrialStatus.pending)):
        trial.status = TrialStatus.cancelled


def cases_by_name(session: Session, repository_id: int, names: Sequence[str]) -> dict[tuple[str, str, str], Case]:
    rows = session.scalars(select(Case).where(Case.repository_id == repository_id, Case.name.in_(list(names)))).all()
    return {(c.suite, c.target, c.name): c for c in rows}


def delete_culprits(session: Session, job: Job) -> None:
    for culprit in list(job.culprits):
        session.delete(culprit)
    session.flush()
