"""All SQL about tracked branches and the measurements of their histories."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from perfbisect.service.job_spec import field as spec_field
from perfbisect.service.models import (
    Case,
    Job,
    JobKind,
    JobStatus,
    Measurement,
    Revision,
    TrackedBranch,
    TrackTrigger,
    Trial,
    TrialStatus,
)

OPEN_JOB = (JobStatus.queued, JobStatus.running)


def get(session: Session, tracked_id: int, *, lock: bool = False) -> TrackedBranch | None:
    stmt = select(TrackedBranch).where(TrackedBranch.id == tracked_id).options(selectinload(TrackedBranch.repository))
    if lock:
        stmt = stmt.with_for_update(of=TrackedBranch)
    return session.scalars(stmt).one_or_none()


def list_all(session: Session) -> Sequence[TrackedBranch]:
    stmt = select(TrackedBranch).options(selectinload(TrackedBranch.repository)).order_by(TrackedBranch.id)
    return session.scalars(stmt).all()


def find(session: Session, repository_id: int, branch: str, device_class: str | None = None) -> Sequence[TrackedBranch]:
    stmt = select(TrackedBranch).where(TrackedBranch.repository_id == repository_id, TrackedBranch.branch == branch)
    if device_class is not None:
        stmt = stmt.where(TrackedBranch.device_class == device_class)
    return session.scalars(stmt.order_by(TrackedBranch.id)).all()


def scheduled(session: Session) -> Sequence[TrackedBranch]:
    """Tracked branches that Celery beat runs (schedule or poll triggers)."""
    stmt = select(TrackedBranch).where(TrackedBranch.trigger.in_((TrackTrigger.schedule, TrackTrigger.poll)))
    return session.scalars(stmt.order_by(TrackedBranch.id)).all()


def current_fingerprint(session: Session, repository_id: int, device_class: str) -> str | None:
    """The fingerprint of the newest trial measured ok on this repository and device class:
    the history compared is the one measured like today's trials."""
    stmt = (select(Trial.fingerprint).join(Job, Trial.job_id == Job.id)
            .where(Job.repository_id == repository_id, Trial.device_class == device_class,
                   Trial.status == TrialStatus.ok, Trial.fingerprint.is_not(None))
            .order_by(Trial.finished_at.desc(), Trial.id.desc()).limit(1))
    return session.scalars(stmt).first()


def finished_trials_at(session: Session, repository_id: int, device_class: str, shas: Sequence[str]) -> Sequence[Trial]:
    """Finished trials (of any job) at these commits on this device class, with their cases."""
    stmt = (select(Trial).join(Revision, Trial.revision_id == Revision.id)
            .where(Revision.repository_id == repository_id, Revision.sha.in_(list(shas)),
                   Trial.device_class == device_class, Trial.variant.is_(None),
                   Trial.status.not_in((TrialStatus.pending, TrialStatus.running, TrialStatus.cancelled)))
            .options(selectinload(Trial.revision), selectinload(Trial.measurements).selectinload(Measurement.case)))
    return session.scalars(stmt).all()


def open_track_heads(session: Session, tracked_id: int) -> set[str]:
    """Heads that a queued or running track job of this branch is measuring already."""
    stmt = select(Job.revision_shas).where(Job.kind == JobKind.track, Job.status.in_(OPEN_JOB),
                                           spec_field(Job.spec, "tracked_branch_id").as_integer() == tracked_id)
    return {sha for shas in session.scalars(stmt) for sha in shas}


def remeasures(session: Session, tracked_id: int) -> list[tuple[Job, Sequence[Trial]]]:
    """The branch's side-by-side re-measures (its track jobs whose spec names `remeasure`), each
    with its finished trials (revision and measurements loaded)."""
    stmt = (select(Job).where(Job.kind == JobKind.track, spec_field(Job.spec, "tracked_branch_id").as_integer() == tracked_id,
                              spec_field(Job.spec, "remeasure").as_string().is_not(None))
            .order_by(Job.id))
    jobs = list(session.scalars(stmt))
    trials = session.scalars(
        select(Trial).where(Trial.job_id.in_([j.id for j in jobs]), Trial.status == TrialStatus.ok)
        .options(selectinload(Trial.revision), selectinload(Trial.measurements).selectinload(Measurement.case))).all()
    return [(job, [t for t in trials if t.job_id == job.id]) for job in jobs]


def history_rows(session: Session, repository_id: int, device_class: str, fingerprint: str,
                 case_ids: Sequence[int], shas: Sequence[str]) -> list[tuple[str, int, Measurement]]:
    """(sha, case id, measurement) of every measurement of these cases at these commits in a
    finished trial with this fingerprint and device class, whatever job made it."""
    stmt = (select(Revision.sha, Measurement.case_id, Measurement)
            .join(Trial, Measurement.trial_id == Trial.id).join(Revision, Trial.revision_id == Revision.id)
            .where(Revision.repository_id == repository_id, Revision.sha.in_(list(shas)),
                   Measurement.case_id.in_(list(case_ids)), Trial.device_class == device_class,
                   Trial.fingerprint == fingerprint, Trial.status == TrialStatus.ok, Trial.variant.is_(None)))
    return [(sha, case_id, m) for sha, case_id, m in session.execute(stmt)]


BROKEN_HEAD = (TrialStatus.build_error, TrialStatus.import_error)


def broken_heads(session: Session, tracked_id: int, shas: Sequence[str]) -> dict[str, str]:
    """sha -> failure kind (build_error, import_error) of the heads among `shas` where a trial of
    the branch's track jobs failed to build or import."""
    stmt = (select(Revision.sha, Trial.status).join(Trial, Trial.revision_id == Revision.id)
            .join(Job, Trial.job_id == Job.id)
            .where(Job.kind == JobKind.track, spec_field(Job.spec, "tracked_branch_id").as_integer() == tracked_id,
                   Trial.status.in_(BROKEN_HEAD), Revision.sha.in_(list(shas))).order_by(Trial.id))
    return {sha: status.value for sha, status in session.execute(stmt)}


def cases_of(session: Session, repository_id: int, cases: Sequence[dict]) -> dict[str, Case]:
    """The Case rows of a tracked branch's cases, by name."""
    names = [c["name"] for c in cases]
    rows = session.scalars(select(Case).where(Case.repository_id == repository_id, Case.name.in_(names))).all()
    wanted = {(c["suite"], c["target"], c["name"]) for c in cases}
    return {c.name: c for c in rows if (c.suite, c.target, c.name) in wanted}


def of_repository(session: Session, repository_id: int) -> Sequence[TrackedBranch]:
    """Every tracked branch of a repository, oldest first."""
    stmt = select(TrackedBranch).where(TrackedBranch.repository_id == repository_id).order_by(TrackedBranch.id)
    return session.scalars(stmt).all()
