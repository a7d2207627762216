"""All SQL about jobs, their trials and culprits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload, selectinload

from perfbisect.service.db import insert_or_skip

from perfbisect.service.job_spec import field as spec_field
from perfbisect.service.models import (
    Case,
    CasePoint,
    Culprit,
    IdempotencyKey,
    Job,
    JobStatus,
    Measurement,
    Repository,
    Revision,
    Trial,
    TrialStatus,
)

IN_FLIGHT = (TrialStatus.pending, TrialStatus.running)
OPEN = (JobStatus.queued, JobStatus.running)


def get_job(session: Session, job_id: int, *, lock: bool = False) -> Job | None:
    """The job with its repository (joined: the job read is the hottest query of the API) and
    its culprits; `lock` takes the job's row lock (FOR UPDATE OF jobs)."""
    if lock:  # FOR UPDATE rows are the job's alone: its culprits come in a second query
        stmt = (select(Job).where(Job.id == job_id).with_for_update(of=Job)
                .options(joinedload(Job.repository, innerjoin=True), selectinload(Job.culprits)))
        return session.scalars(stmt).one_or_none()
    # One round trip: a job has a handful of culprits, so joining them repeats its row a few times.
    stmt = select(Job).where(Job.id == job_id).options(joinedload(Job.repository, innerjoin=True),
                                                       joinedload(Job.culprits))
    return session.scalars(stmt).unique().one_or_none()


def open_job_by_request(session: Session, request_hash: str) -> Job | None:
    """The queued or running job of this normalized request (at most one: a partial unique index)."""
    stmt = (select(Job).where(Job.request_hash == request_hash, Job.status.in_(OPEN))
            .options(selectinload(Job.repository), selectinload(Job.culprits)))
    return session.scalars(stmt).first()


def idempotency_key(session: Session, token_id: int, key: str) -> IdempotencyKey | None:
    return session.get(IdempotencyKey, (token_id, key))


def list_jobs(session: Session, *, status: JobStatus | None = None, repository_id: int | None = None,
              before: int | None = None, limit: int = 100) -> Sequence[Job]:
    """Newest first (keyset: ids below `before`), with the repository and culprits loaded in two
    queries whatever the page size."""
    stmt = select(Job).options(selectinload(Job.repository), selectinload(Job.culprits))
    if status is not None:
        stmt = stmt.where(Job.status == status)
    if repository_id is not None:
        stmt = stmt.where(Job.repository_id == repository_id)
    if before is not None:
        stmt = stmt.where(Job.id < before)
    return session.scalars(stmt.order_by(Job.id.desc()).limit(limit)).all()


def job_summaries(session: Session, *, status: JobStatus | None = None, before: int | None = None,
                  limit: int = 50) -> Sequence:
    """The jobs list's rows in one query: no range, no spec beyond its refs, a culprit count."""
    culprits = (select(func.count()).select_from(Culprit).where(Culprit.job_id == Job.id)
                .correlate(Job).scalar_subquery())
    stmt = (select(Job.id, Job.kind, Job.status, Repository.name.label("repository"),
                   spec_field(Job.spec, "good").as_string().label("good"),
                   spec_field(Job.spec, "bad").as_string().label("bad"),
                   spec_field(Job.spec, "pr_number").as_integer().label("pr_number"), Job.progress, Job.error,
                   Job.created_at, Job.started_at, Job.finished_at, culprits.label("culprits"))
            .join(Repository, Job.repository_id == Repository.id))
    if status is not None:
        stmt = stmt.where(Job.status == status)
    if before is not None:
        stmt = stmt.where(Job.id < before)
    return session.execute(stmt.order_by(Job.id.desc()).limit(limit)).all()


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


def trials_of(session: Session, job_id: int, *, after: int | None = None, limit: int | None = None) -> Sequence[Trial]:
    """The job's trials with their revision and measurements (never the raw samples), id order;
    `after`/`limit` page through them by id."""
    stmt = (
        select(Trial)
        .where(Trial.job_id == job_id)
        .options(selectinload(Trial.revision), selectinload(Trial.measurements).selectinload(Measurement.case))
        .order_by(Trial.id)
    )
    if after is not None:
        stmt = stmt.where(Trial.id > after)
    if limit is not None:
        stmt = stmt.limit(limit)
    return session.scalars(stmt).all()


def cancel_in_flight(session: Session, job_id: int, *, accuracy_only: bool | None = None) -> None:
    """Cancel the job's pending trials (only its sweep trials, or only its timed ones, when
    `accuracy_only` says so); running ones finish."""
    stmt = select(Trial).where(Trial.job_id == job_id, Trial.status == TrialStatus.pending)
    if accuracy_only is not None:
        stmt = stmt.where(Trial.accuracy_only.is_(accuracy_only))
    for trial in session.scalars(stmt):
        trial.status = TrialStatus.cancelled


def cases_by_name(session: Session, repository_id: int, names: Sequence[str]) -> dict[tuple[str, str, str], Case]:
    rows = session.scalars(select(Case).where(Case.repository_id == repository_id, Case.name.in_(list(names)))).all()
    return {(c.suite, c.target, c.name): c for c in rows}


def delete_culprits(session: Session, job: Job) -> None:
    for culprit in list(job.culprits):
        session.delete(culprit)
    session.flush()


def open_jobs_of_token(session: Session, token_id: int) -> int:
    """Queued and running jobs submitted with the token."""
    return session.scalar(select(func.count()).select_from(Job).where(
        Job.submitter_token_id == token_id, Job.status.in_(OPEN))) or 0


def trials_in_flight_of_token(session: Session, token_id: int) -> int:
    """Pending and running trials of the token's open jobs."""
    return session.scalar(select(func.count()).select_from(Trial).join(Job, Job.id == Trial.job_id).where(
        Job.submitter_token_id == token_id, Job.status.in_(OPEN), Trial.status.in_(IN_FLIGHT))) or 0


def resolving_jobs(session: Session, repository_id: int, *, exclude: int | None = None) -> list[int]:
    """Open jobs of the repository whose revisions are not resolved yet."""
    stmt = select(Job.id).where(Job.repository_id == repository_id, Job.status == JobStatus.queued,
                                Job.progress["phase"].as_string() == "resolving revisions")
    return [job_id for job_id in session.scalars(stmt) if job_id != exclude]


def store_cases(session: Session, repository_id: int, cases: list[dict[str, Any]]) -> None:
    """Insert the cases the repository does not have yet (by suite, target and name)."""
    known = cases_by_name(session, repository_id, [c["name"] for c in cases])
    missing = [{"repository_id": repository_id, "suite": c["suite"], "target": c["target"], "name": c["name"],
                "params": c["params"]} for c in cases if (c["suite"], c["target"], c["name"]) not in known]
    insert_or_skip(session, Case, missing, ["repository_id", "suite", "target", "name"])


def history_values(session: Session, repository_id: int, shas: Sequence[str]) -> list[Any]:
    """Every case point of the repository at these revisions: (suite, target, name, fingerprint,
    sha, ratio, value) rows, a tracked history's (or an earlier job's) medians."""
    stmt = (select(Case.suite, Case.target, Case.name, CasePoint.fingerprint, Revision.sha, CasePoint.ratio,
                   CasePoint.value)
            .join(Case, CasePoint.case_id == Case.id).join(Revision, CasePoint.revision_id == Revision.id)
            .where(Case.repository_id == repository_id, Revision.sha.in_(list(shas))))
    return list(session.execute(stmt))
