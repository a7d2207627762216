"""All SQL of the PR bot. Reads only; the service adds the job through service.jobs."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from perfbisect.service.job_spec import field as spec_field
from perfbisect.service.models import Job, JobKind, JobStatus, Repository, WebhookDelivery


def all_repositories(session: Session) -> Sequence[Repository]:
    """Every registered repository, oldest first (URL matching is done in Python: URLs are
    stored as given, so the database cannot compare their normalized forms)."""
    return session.scalars(select(Repository).order_by(Repository.id)).all()


def open_compare(session: Session, repository_id: int, base_sha: str, head_sha: str) -> Job | None:
    """A compare job of the same base and head that has not failed or been cancelled (a
    redelivered webhook, or a reopened PR with the same head, reuses it), resolved or still
    resolving (its refs are then the shas as sent)."""
    stmt = (select(Job).where(Job.repository_id == repository_id, Job.kind == JobKind.compare,
                              Job.status.in_((JobStatus.queued, JobStatus.running, JobStatus.succeeded)),
                              or_(and_(spec_field(Job.spec, "good_sha").as_string() == base_sha,
                                       spec_field(Job.spec, "bad_sha").as_string() == head_sha),
                                  and_(spec_field(Job.spec, "good").as_string() == base_sha,
                                       spec_field(Job.spec, "bad").as_string() == head_sha)))
            .order_by(Job.id.desc()).limit(1))
    return session.scalars(stmt).first()


def open_compares_of_pr(session: Session, repository_id: int, pr_number: int) -> Sequence[Job]:
    """Queued or running compare jobs of one pull request (superseded when its head moves)."""
    stmt = (select(Job).where(Job.repository_id == repository_id, Job.kind == JobKind.compare,
                              Job.status.in_((JobStatus.queued, JobStatus.running)),
                              spec_field(Job.spec, "pr_number").as_integer() == pr_number)
            .order_by(Job.id))
    return session.scalars(stmt).all()


def delivery_seen(session: Session, delivery_id: str, body_sha256: str) -> bool:
    stmt = select(WebhookDelivery.id).where(or_(WebhookDelivery.delivery_id == delivery_id,
                                                WebhookDelivery.body_sha256 == body_sha256))
    return session.scalars(stmt.limit(1)).first() is not None
