"""The tables. SQLAlchemy 2 typed mappings; the schema itself is owned by the Alembic migrations.

Vocabulary (DESIGN.md): a *repository* is registered once; a *revision* is one commit; a *job* is
a bisect, compare or track over a repository; a *case* is one suite + shape + dtype + options (one
time series); a *trial* is one fresh process at one revision measuring every case of a job; a
*measurement* is one case's result inside a trial; a *culprit* is the commit (or commit range)
where a step happens, with the effect on every case.
"""

from __future__ import annotations

import enum
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, DateTime, Enum, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

JSONType = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType, datetime: DateTime(timezone=True)}


class JobKind(str, enum.Enum):
    bisect = "bisect"
    compare = "compare"
    track = "track"


class JobStatus(str, enum.Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"  # a verdict for every case (regressed, improved or unchanged)
    inconclusive = "inconclusive"  # every case measured, some not decided (too noisy, trial cap)
    failed = "failed"  # some case could not be measured, or the planning failed
    cancelled = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.succeeded, JobStatus.inconclusive, JobStatus.failed, JobStatus.cancelled)


class TrialStatus(str, enum.Enum):
    pending = "pending"  # planned, not yet taken by a worker
    running = "running"
    ok = "ok"  # every case measured (a case may still be wrong_results)
    build_error = "build_error"
    import_error = "import_error"
    timeout = "timeout"
    error = "error"
    cancelled = "cancelled"

    @property
    def finished(self) -> bool:
        return self not in (TrialStatus.pending, TrialStatus.running)


class CulpritKind(str, enum.Enum):
    performance = "performance"
    correctness = "correctness"


def _enum(cls: type[enum.Enum]) -> Enum:
    return Enum(cls, name=cls.__name__.lower(), native_enum=False, length=20)


class Repository(Base):
    __tablename__ = "repositories"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    url: Mapped[str] = mapped_column(Text, doc="git URL or local path, cloned as a mirror")
    build_command: Mapped[str | None] = mapped_column(Text)
    import_root: Mapped[str] = mapped_column(String(200), default=".")
    env: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="extra variables, e.g. cold JIT caches")
    default_branch: Mapped[str] = mapped_column(String(200), default="main")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Revision(Base):
    __tablename__ = "revisions"
    __table_args__ = (UniqueConstraint("repository_id", "sha"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    sha: Mapped[str] = mapped_column(String(64))
    parent_sha: Mapped[str | None] = mapped_column(String(64))
    author: Mapped[str | None] = mapped_column(String(200))
    authored_at: Mapped[datetime | None]
    subject: Mapped[str] = mapped_column(Text, default="")
    pr_number: Mapped[int | None] = mapped_column(Integer)


class Case(Base):
    __tablename__ = "cases"
    __table_args__ = (UniqueConstraint("repository_id", "suite", "target", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    suite: Mapped[str] = mapped_column(String(200))
    target: Mapped[str] = mapped_column(String(300))
    name: Mapped[str] = mapped_column(String(300), doc="canonical 'K=V,...' form")
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[JobKind] = mapped_column(_enum(JobKind))
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus), default=JobStatus.queued, index=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(doc="the validated request: refs, suite, target, cases, ...")
    revision_shas: Mapped[list[Any]] = mapped_column(doc="the range, good first, first-parent order")
    progress: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(doc='{"outcome": ...}: per-case outcomes, noise, failures')
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    repository: Mapped[Repository] = relationship(lazy="raise")
    culprits: Mapped[list[Culprit]] = relationship(
        back_populates="job", lazy="raise", cascade="all, delete-orphan", order_by="Culprit.id"
    )


class Trial(Base):
    __tablename__ = "trials"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"), index=True)
    status: Mapped[TrialStatus] = mapped_column(_enum(TrialStatus), default=TrialStatus.pending, index=True)
    device_class: Mapped[str] = mapped_column(String(50), default="cpu")
    accuracy_only: Mapped[bool] = mapped_column(default=False, doc="a correctness-sweep trial: no timing loop")
    device: Mapped[str | None] = mapped_column(String(200), doc="device model as the harness saw it")
    fingerprint: Mapped[str | None] = mapped_column(String(64), index=True)
    provenance: Mapped[dict[str, Any] | None]
    failure_reason: Mapped[str | None] = mapped_column(Text)
    worker_host: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    build_s: Mapped[float | None] = mapped_column(Float)
    run_s: Mapped[float | None] = mapped_column(Float)

    revision: Mapped[Revision] = relationship(lazy="raise")
    measurements: Mapped[list[Measurement]] = relationship(
        back_populates="trial", lazy="raise", cascade="all, delete-orphan"
    )


class Measurement(Base):
    """One case inside one trial: the raw samples and their summary (conbench's result row)."""

    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("trial_id", "case_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(30), doc="ok, wrong_results, compile_error, error")
    error: Mapped[str | None] = mapped_column(Text)
    ratio: Mapped[float | None] = mapped_column(Float, doc="median control_time/target_time")
    value: Mapped[float | None] = mapped_column(Float, doc="median target metric, e.g. TFLOP/s")
    control_value: Mapped[float | None] = mapped_column(Float)
    unit: Mapped[str | None] = mapped_column(String(20))
    higher_is_better: Mapped[bool] = mapped_column(default=True)
    accuracy_error: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="raw target/control times, ratios, clocks")

    trial: Mapped[Trial] = relationship(back_populates="measurements", lazy="raise")
    case: Mapped[Case] = relationship(lazy="raise")


class Culprit(Base):
    __tablename__ = "culprits"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[CulpritKind] = mapped_column(_enum(CulpritKind))
    first_sha: Mapped[str] = mapped_column(String(64), doc="first commit that may hold the step")
    last_sha: Mapped[str] = mapped_column(String(64), doc="equal to first_sha when the commit is exact")
    revision_id: Mapped[int | None] = mapped_column(ForeignKey("revisions.id", ondelete="SET NULL"))
    effects: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="case -> rel, ci, before, after")
    fixed_sha: Mapped[str | None] = mapped_column(String(64), doc="correctness: where it was fixed")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    job: Mapped[Job] = relationship(back_populates="culprits", lazy="raise")
    revision: Mapped[Revision | None] = relationship(lazy="raise")
