"""All SQL of the evidence domain: a job's profiled trials and the provenance of the trials the
culprit's step was measured on."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfbisect.service.jobs.repository import get_job
from perfbisect.service.models import Culprit, Job, Revision, Trial, TrialStatus
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload


def job_with_culprits(session: Session, job_id: int) -> Job | None:
    return get_job(session, job_id)


def profiled_trials(session: Session, job_id: int) -> Sequence[Trial]:
    """The job's profiled trials (issue 43) with their revision, id order."""
    stmt = (select(Trial).where(Trial.job_id == job_id, Trial.profile.is_(True))
            .options(selectinload(Trial.revision)).order_by(Trial.id))
    return session.scalars(stmt).all()


def _timed_provenance(session: Session, job_id: int, sha: str) -> dict[str, Any] | None:
    """The device provenance of the newest ok timing trial of the job at `sha`."""
    stmt = (select(Trial.provenance).join(Revision, Revision.id == Trial.revision_id)
            .where(Trial.job_id == job_id, Revision.sha == sha, Trial.profile.is_(False),
                   Trial.status == TrialStatus.ok, Trial.variant.is_(None))
            .order_by(Trial.id.desc()).limit(1))
    return session.scalar(stmt)


def compared_provenance(session: Session, job: Job, culprit: Culprit, before: Trial | None,
                        after: Trial | None) -> tuple[dict | None, dict | None]:
    """The device provenance of the trials compared at the culprit's two ends: the timing trials
    at the profiled revisions (else at the culprit's last commit and the revision before its
    first), falling back on the profiled trials' own."""
    shas = job.revision_shas
    first = shas.index(culprit.first_sha) if culprit.first_sha in shas else 0
    before_sha = before.revision.sha if before else (shas[first - 1] if first > 0 else None)
    after_sha = after.revision.sha if after else culprit.last_sha
    left = _timed_provenance(session, job.id, before_sha) if before_sha else None
    right = _timed_provenance(session, job.id, after_sha)
    return (left or (before.provenance if before else None), right or (after.provenance if after else None))
