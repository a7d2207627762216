"""All SQL about alerts."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session, selectinload

from perfbisect.service.job_spec import field as spec_field
from perfbisect.service.models import (Alert, AlertBranch, AlertCase, AlertChange, AlertKind, AlertStatus, Culprit,
                                      CulpritKind, Job, JobKind, JobStatus, Repository, TrackedBranch)

_LOAD = (selectinload(Alert.cases).selectinload(AlertCase.case), selectinload(Alert.also_on))


def get(session: Session, alert_id: int, *, lock: bool = False) -> Alert | None:
    stmt = select(Alert).where(Alert.id == alert_id).options(*_LOAD)
    if lock:
        stmt = stmt.with_for_update(of=Alert)
    return session.scalars(stmt).one_or_none()


def of_branch(session: Session, tracked_id: int) -> Sequence[Alert]:
    stmt = select(Alert).where(Alert.tracked_branch_id == tracked_id).options(*_LOAD).order_by(Alert.id)
    return session.scalars(stmt).all()


def listing(session: Session, *, status: AlertStatus | None = None, tracked_id: int | None = None,
            repository: str | None = None, branch: str | None = None, kind: AlertKind | None = None,
            assignee: str | None = None, limit: int = 100) -> Sequence[Alert]:
    """Alerts newest first, narrowed by each filter given (all of them must hold). A tracked
    branch or branch name matches an alert of that branch and one the branch attached to."""
    stmt = select(Alert).options(*_LOAD)
    if repository is not None:
        stmt = (stmt.join(TrackedBranch, Alert.tracked_branch_id == TrackedBranch.id)
                .join(Repository, TrackedBranch.repository_id == Repository.id).where(Repository.name == repository))
    if tracked_id is not None or branch is not None:
        on = select(TrackedBranch.id).where(*([TrackedBranch.id == tracked_id] if tracked_id is not None else []),
                                            *([TrackedBranch.branch == branch] if branch is not None else []))
        stmt = stmt.where(Alert.tracked_branch_id.in_(on) | exists().where(
            AlertBranch.alert_id == Alert.id, AlertBranch.tracked_branch_id.in_(on)))
    for column, wanted in ((Alert.status, status), (Alert.kind, kind), (Alert.assignee, assignee)):
        if wanted is not None:
            stmt = stmt.where(column == wanted)
    return session.scalars(stmt.order_by(Alert.id.desc()).limit(limit)).all()


def attached_to(session: Session, tracked_id: int) -> list[tuple[Alert, AlertBranch]]:
    """The alerts of other branches that this branch attached to (service/alerts/same_change)."""
    stmt = (select(Alert, AlertBranch).join(AlertBranch, AlertBranch.alert_id == Alert.id)
            .where(AlertBranch.tracked_branch_id == tracked_id).options(*_LOAD).order_by(Alert.id))
    return [(alert, row) for alert, row in session.execute(stmt)]


def with_culprit(session: Session, repository_id: int, kind: AlertKind, tracked_id: int) -> Sequence[Alert]:
    """Alerts of the repository's other tracked branches of this kind with an exact culprit, not
    attached to `tracked_id` yet, oldest first."""
    attached = exists().where(AlertBranch.alert_id == Alert.id, AlertBranch.tracked_branch_id == tracked_id)
    stmt = (select(Alert).join(TrackedBranch, Alert.tracked_branch_id == TrackedBranch.id)
            .where(TrackedBranch.repository_id == repository_id, Alert.tracked_branch_id != tracked_id,
                   Alert.kind == kind, Alert.culprit_last_sha.is_not(None),
                   Alert.culprit_first_sha == Alert.culprit_last_sha, ~attached)
            .options(*_LOAD).order_by(Alert.id))
    return session.scalars(stmt).all()


def same_culprit(session: Session, alert: Alert, sha: str) -> Sequence[Alert]:
    """Older alerts of the repository's other tracked branches, of the alert's kind, whose exact
    culprit is `sha`, oldest first."""
    repository_id = select(TrackedBranch.repository_id).where(TrackedBranch.id == alert.tracked_branch_id)
    stmt = (select(Alert).join(TrackedBranch, Alert.tracked_branch_id == TrackedBranch.id)
            .where(TrackedBranch.repository_id == repository_id.scalar_subquery(), Alert.id < alert.id,
                   Alert.tracked_branch_id != alert.tracked_branch_id, Alert.kind == alert.kind,
                   Alert.culprit_first_sha == sha, Alert.culprit_last_sha == sha)
            .options(*_LOAD).order_by(Alert.id))
    return session.scalars(stmt).all()


def changes(session: Session, alert_id: int) -> Sequence[AlertChange]:
    stmt = select(AlertChange).where(AlertChange.alert_id == alert_id).order_by(AlertChange.id)
    return session.scalars(stmt).all()


def of_jobs(session: Session, job_ids: Sequence[int]) -> dict[int, int]:
    """bisect job id -> the id of the alert it bisects, for the given jobs."""
    stmt = select(Alert.bisect_job_id, Alert.id).where(Alert.bisect_job_id.in_(list(job_ids)))
    return {job_id: alert_id for job_id, alert_id in session.execute(stmt)}


def by_bisect_job(session: Session, job_id: int) -> Alert | None:
    return session.scalars(select(Alert).where(Alert.bisect_job_id == job_id).options(*_LOAD)).first()


def running_bisects(session: Session, tracked_id: int) -> int:
    stmt = (select(func.count()).select_from(Alert).join(Job, Alert.bisect_job_id == Job.id)
            .where(Alert.tracked_branch_id == tracked_id, Job.status.in_((JobStatus.queued, JobStatus.running))))
    return session.scalar(stmt) or 0


def branches(session: Session, ids: Sequence[int]) -> dict[int, TrackedBranch]:
    stmt = select(TrackedBranch).where(TrackedBranch.id.in_(list(ids))).options(selectinload(TrackedBranch.repository))
    return {t.id: t for t in session.scalars(stmt)}


def bisect_culprit(session: Session, alert: Alert) -> Culprit | None:
    """The culprit row stored for the alert's culprit commit (its per-case effects with intervals
    and units): by the alert's bisect, or, for a one-commit alert named without one, by the
    tracking (service/alerts/one_commit.py) on a track job of the alert's branch. None without."""
    if alert.culprit_last_sha is None:
        return None
    stmt = select(Culprit).where(Culprit.first_sha == alert.culprit_first_sha,
                                 Culprit.last_sha == alert.culprit_last_sha).order_by(Culprit.id)
    if alert.bisect_job_id is not None:
        stmt = stmt.where(Culprit.job_id == alert.bisect_job_id)
    else:
        stmt = stmt.join(Job, Culprit.job_id == Job.id).where(
            Job.kind == JobKind.track, spec_field(Job.spec, "tracked_branch_id").as_integer() == alert.tracked_branch_id)
    found = session.scalars(stmt).all()
    wanted = CulpritKind.correctness if alert.kind == AlertKind.wrong_results else CulpritKind.performance
    return next((c for c in found if c.kind == wanted), found[0] if found else None)


def status_counts(session: Session) -> dict[int, dict[str, int]]:
    """tracked branch id -> alert status -> count."""
    stmt = select(Alert.tracked_branch_id, Alert.status, func.count()).group_by(Alert.tracked_branch_id, Alert.status)
    out: dict[int, dict[str, int]] = {}
    for tracked_id, status, count in session.execute(stmt):
        out.setdefault(tracked_id, {})[AlertStatus(status).value] = count
    return out


def by_ids(session: Session, ids: Sequence[int]) -> Sequence[Alert]:
    return session.scalars(select(Alert).where(Alert.id.in_(list(ids)))).all()
