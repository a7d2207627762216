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

from sqlalchemy import JSON, BigInteger, DateTime, Enum, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates

from perfbisect.service import job_spec

JSONType = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator):
    """One rule for timestamps on every database: aware UTC in, aware UTC out. PostgreSQL keeps
    the offset (timestamptz); SQLite keeps none and hands back naive values, which by this rule
    are UTC. A naive value given to be stored is taken as UTC too."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType, datetime: UTCDateTime()}


class JobKind(str, enum.Enum):
    bisect = "bisect"
    compare = "compare"
    track = "track"
    attribute = "attribute"  # the bad end of a bisect with its culprits reverted, alone and together
    localize = "localize"  # a culprit's parent with subsets of its hunks applied, beside the culprit (issue 43)


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
    # the worker failed before the revision's code ran (checkout, sandbox, a crash of the worker
    # itself): says nothing about the revision, which is tried again
    worker_error = "worker_error"
    # an attribution variant whose reverts do not apply cleanly at the bad end (failure_reason
    # names the conflicting files): a fact about the variant, never retried
    revert_conflict = "revert_conflict"
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
    build_inputs: Mapped[list[Any]] = mapped_column(
        default=list, doc="paths and globs its build's output depends on (the build cache's key); []: no cache")
    import_root: Mapped[str] = mapped_column(String(200), default=".")
    env: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="extra variables, e.g. cold JIT caches")
    default_branch: Mapped[str] = mapped_column(String(200), default="main")
    pr_policy: Mapped[dict[str, Any]] = mapped_column(
        default=dict, doc="the PR bot: inconclusive/failed -> neutral|failure, benchmark_set, kernel_paths")
    dependencies: Mapped[list[Any]] = mapped_column(
        default=list, doc="the dependencies it pins (repos.schemas.Dependency): a culprit moving a pin is descended")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Revision(Base):
    __tablename__ = "revisions"
    __table_args__ = (UniqueConstraint("repository_id", "sha"),
                      Index("ix_revisions_repository_position", "repository_id", "position"))

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    sha: Mapped[str] = mapped_column(String(64))
    parent_sha: Mapped[str | None] = mapped_column(String(64))
    author: Mapped[str | None] = mapped_column(String(200))
    authored_at: Mapped[datetime | None]
    subject: Mapped[str] = mapped_column(Text, default="")
    pr_number: Mapped[int | None] = mapped_column(Integer)
    position: Mapped[int | None] = mapped_column(
        Integer, doc="first-parent depth on its branch (0 = root); None for a commit off the branch (a PR head)")


class Case(Base):
    __tablename__ = "cases"
    __table_args__ = (UniqueConstraint("repository_id", "suite", "target", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    suite: Mapped[str] = mapped_column(String(200))
    target: Mapped[str] = mapped_column(String(300))
    name: Mapped[str] = mapped_column(String(300), doc="canonical 'K=V,...' form")
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)


class SuiteSource(Base):
    """A suite file sent with a request (not in the repository), stored once by its sha256; the
    workers read it from here and apply it to every revision."""

    __tablename__ = "suite_sources"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class BenchmarkSet(Base):
    """A named set of cases registered on a repository (suites, targets, shape presets): a job
    that names it measures its cases."""

    __tablename__ = "benchmark_sets"
    __table_args__ = (UniqueConstraint("repository_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    cases: Mapped[list[Any]] = mapped_column(doc="resolved cases, as a job spec lists them")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# Open jobs (queued, running) with the same normalized request are one job: a partial unique
# index, so two identical concurrent submissions cannot both insert (migration 0002_security).
OPEN_JOB = text("status IN ('queued', 'running')")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("uq_jobs_open_request_hash", "request_hash", unique=True,
              postgresql_where=OPEN_JOB, sqlite_where=OPEN_JOB),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[JobKind] = mapped_column(_enum(JobKind))
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus), default=JobStatus.queued, index=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    spec: Mapped[job_spec.JobSpec] = mapped_column(job_spec.SpecType(), doc="what the job was asked: refs, cases, ...")
    revision_shas: Mapped[list[Any]] = mapped_column(doc="the range, good first, first-parent order")
    progress: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(doc='{"outcome": ...}: per-case outcomes, noise, failures')
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    submitter_token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="SET NULL"), index=True, doc="may cancel it besides admins")
    request_hash: Mapped[str | None] = mapped_column(String(64), doc="sha256 of the normalized request")

    repository: Mapped[Repository] = relationship(lazy="raise")
    culprits: Mapped[list[Culprit]] = relationship(
        back_populates="job", lazy="raise", cascade="all, delete-orphan", order_by="Culprit.id"
    )

    @validates("spec")
    def _typed_spec(self, _key: str, value: job_spec.JobSpec | dict[str, Any]) -> job_spec.JobSpec:
        """The spec as the model of the job's kind (a dict given is validated here, not at flush)."""
        return job_spec.load(value, JobKind(self.kind).value if self.kind is not None else None)


class Trial(Base):
    __tablename__ = "trials"
    __table_args__ = (Index("ix_trials_status_dispatched_at", "status", "dispatched_at"),
                      # the newest trial of a fingerprint is a backward probe (dashboards.repository.devices_of)
                      Index("ix_trials_fingerprint_id", "fingerprint", "id"),
                      Index("ix_trials_job_id_block", "job_id", "block"))

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"), index=True)
    status: Mapped[TrialStatus] = mapped_column(_enum(TrialStatus), default=TrialStatus.pending, index=True)
    device_class: Mapped[str] = mapped_column(String(50), default="cpu")
    accuracy_only: Mapped[bool] = mapped_column(default=False, doc="a correctness-sweep trial: no timing loop")
    variant: Mapped[str | None] = mapped_column(
        String(100), doc="attribution: culprit indices reverted at the revision ('0+1'); None: the commit as it is")
    block: Mapped[int | None] = mapped_column(
        Integer, doc="side-by-side block (issue 23), unique within the job; None: an unpaired trial")
    block_slot: Mapped[int | None] = mapped_column(Integer, doc="position in the block's A B B A order (0..3)")
    profile: Mapped[bool] = mapped_column(
        default=False, server_default=text("false"),
        doc="a culprit's profiled trial (issue 43): kernels and compiled code, never a measurement")
    evidence: Mapped[dict[str, Any] | None] = mapped_column(
        doc="a profiled trial's findings: per case the profiler's kernel table, the JIT cache, the live Triton objects")
    device: Mapped[str | None] = mapped_column(String(200), doc="device model as the harness saw it")
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    provenance: Mapped[dict[str, Any] | None]
    failure_reason: Mapped[str | None] = mapped_column(Text)
    worker_host: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    dispatched_at: Mapped[datetime | None] = mapped_column(doc="last time its message was sent (the reconciler re-sends lost ones)")
    heartbeat_at: Mapped[datetime | None] = mapped_column(doc="a running trial's worker says it is alive every few seconds")
    samples_pruned_at: Mapped[datetime | None] = mapped_column(
        doc="when its measurements' raw samples were deleted past the retention (service/trials/retention.py)")
    build_s: Mapped[float | None] = mapped_column(Float)
    build_cache: Mapped[dict[str, Any] | None] = mapped_column(
        doc="what the build cache did: key, cached, built_for, stored, note; None where no inputs are declared")
    run_s: Mapped[float | None] = mapped_column(Float)
    phases: Mapped[dict[str, Any] | None] = mapped_column(
        doc="seconds per phase: checkout, build, start, import, compile, inputs_reference, timing, teardown")
    imported: Mapped[list[Any] | None] = mapped_column(
        doc="worktree-relative files the trial's modules were loaded from (hunk localization keeps these)")

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

    trial: Mapped[Trial] = relationship(back_populates="measurements", lazy="raise")
    case: Mapped[Case] = relationship(lazy="raise")
    raw: Mapped[MeasurementSamples | None] = relationship(lazy="raise", cascade="all, delete-orphan")


class MeasurementSamples(Base):
    """The raw samples of one measurement, kept out of the hot `measurements` table: histories and
    planning read only the summaries; the samples are fetched when someone asks for them."""

    __tablename__ = "measurement_samples"

    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True)
    samples: Mapped[dict[str, Any]] = mapped_column(doc="raw target/control times, ratios, clocks")


class CasePoint(Base):
    """A case's value at one revision for one fingerprint: the medians over its ok trials. Kept
    up to date as trials are stored, so a history is an index range scan over (case, position)."""

    __tablename__ = "case_points"
    # On PostgreSQL the index covers what a history reads: an index-only range scan.
    __table_args__ = (UniqueConstraint("case_id", "revision_id", "fingerprint"),
                      Index("ix_case_points_case_position", "case_id", "position",
                            postgresql_include=["fingerprint", "revision_id", "trials", "value", "control_value",
                                                "ratio", "unit", "higher_is_better", "value_min", "value_max",
                                                "ratio_min", "ratio_max", "version"]))

    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id", ondelete="CASCADE"))
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"), index=True)
    fingerprint: Mapped[str] = mapped_column(String(64), doc="'' when the trial had none")
    position: Mapped[int | None] = mapped_column(Integer, doc="the revision's position, copied for the index")
    trials: Mapped[int]
    value: Mapped[float | None] = mapped_column(Float)
    control_value: Mapped[float | None] = mapped_column(Float)
    ratio: Mapped[float | None] = mapped_column(Float)
    unit: Mapped[str | None] = mapped_column(String(20))
    higher_is_better: Mapped[bool] = mapped_column(default=True)
    # The spread over the ok trials (drawn as a band around the median).
    value_min: Mapped[float | None] = mapped_column(Float)
    value_max: Mapped[float | None] = mapped_column(Float)
    ratio_min: Mapped[float | None] = mapped_column(Float)
    ratio_max: Mapped[float | None] = mapped_column(Float)
    # New on every insert and update (PostgreSQL: a sequence and a trigger, migration 0017): the
    # bounded history's ETag aggregates these instead of reading every point. 0 elsewhere.
    version: Mapped[int] = mapped_column(BigInteger, server_default="0")


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


class ApiToken(Base):
    """A bearer token. Only the sha256 of the token is stored; the token itself is shown once."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16), doc="the token's first characters, to recognise it")
    scopes: Mapped[list[Any]] = mapped_column(doc="read, submit, triage, admin")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class IdempotencyKey(Base):
    """`Idempotency-Key` of a job submission: the same key from the same token gets the same job."""

    __tablename__ = "idempotency_keys"

    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    body_hash: Mapped[str] = mapped_column(String(64), doc="a reused key with another body is refused")
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """A GitHub delivery already handled: a redelivery or a replay of the same body is ignored."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(100), unique=True, doc="X-GitHub-Delivery")
    body_sha256: Mapped[str] = mapped_column(String(64), unique=True, doc="the signature covers the body only")
    event: Mapped[str] = mapped_column(String(100))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
class TrackTrigger(str, enum.Enum):
    push = "push"  # the GitHub push webhook
    schedule = "schedule"  # Celery beat, every interval_s, whether the head moved or not
    poll = "poll"  # Celery beat checks every interval_s and runs only when the head moved


class AlertKind(str, enum.Enum):
    regression = "regression"
    improvement = "improvement"
    wrong_results = "wrong_results"
    broken = "broken"  # a tracked head failed to build or import (an alert without cases)
    noisier = "noisier"  # the calls' spread rose at a head (issue 46; service/alerts/spread.py)
    bimodal = "bimodal"  # the calls gained a second mode at a head


class AlertStatus(str, enum.Enum):
    new = "new"
    acknowledged = "acknowledged"
    investigating = "investigating"
    invalid = "invalid"
    fixed = "fixed"
    expected = "expected"


class TrackedBranch(Base):
    """A branch whose heads are measured on every push (or on a schedule) with one benchmark set
    on one device class; each measured head is a trial of a `track` job like any other."""

    __tablename__ = "tracked_branches"
    __table_args__ = (UniqueConstraint("repository_id", "branch", "device_class"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    branch: Mapped[str] = mapped_column(String(200))
    device_class: Mapped[str] = mapped_column(String(50), default="cpu")
    cases: Mapped[list[Any]] = mapped_column(doc="resolved cases, as a job spec lists them")
    metric: Mapped[str] = mapped_column(String(10), default="ratio")
    policy: Mapped[dict[str, Any] | None]
    trigger: Mapped[TrackTrigger] = mapped_column(_enum(TrackTrigger), default=TrackTrigger.push)
    interval_s: Mapped[int] = mapped_column(default=3600)
    backfill_every: Mapped[int] = mapped_column(default=1)
    backfill_depth: Mapped[int] = mapped_column(default=1)
    trials_per_head: Mapped[int] = mapped_column(default=3)
    min_magnitude: Mapped[float] = mapped_column(Float, default=0.05)
    max_bisects: Mapped[int] = mapped_column(default=2, doc="alert bisects running at once")
    confirm_trials: Mapped[int] = mapped_column(default=3, server_default="3",
                                                doc="trials of each side of a suspected step, re-measured side by "
                                                    "side before it alerts (0: alert at once)")
    last_sha: Mapped[str | None] = mapped_column(String(64), doc="the head of the last run")
    last_run_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    repository: Mapped[Repository] = relationship(lazy="raise")


class Alert(Base):
    """A step on a tracked branch: Perfherder's alert summary, one row per range, with the
    cases that moved in it (AlertCase). `before_sha` is the last measured head before the step,
    `last_sha` the first after it; the culprit is one of `first_sha..last_sha`."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(primary_key=True)
    tracked_branch_id: Mapped[int] = mapped_column(ForeignKey("tracked_branches.id", ondelete="CASCADE"), index=True)
    kind: Mapped[AlertKind] = mapped_column(_enum(AlertKind))
    status: Mapped[AlertStatus] = mapped_column(_enum(AlertStatus), default=AlertStatus.new, index=True)
    before_sha: Mapped[str] = mapped_column(String(64))
    first_sha: Mapped[str] = mapped_column(String(64))
    last_sha: Mapped[str] = mapped_column(String(64))
    magnitude: Mapped[float] = mapped_column(Float, default=0.0, doc="largest |relative step| of its cases")
    culprit_first_sha: Mapped[str | None] = mapped_column(String(64))
    culprit_last_sha: Mapped[str | None] = mapped_column(String(64), doc="equal to first when exact")
    culprit_pr: Mapped[int | None] = mapped_column(Integer)
    bisect_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    fixed_by_id: Mapped[int | None] = mapped_column(ForeignKey("alerts.id", ondelete="SET NULL"))
    note: Mapped[str | None] = mapped_column(Text)
    comments: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="PR number -> comment URL")
    detections: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    triaged_at: Mapped[datetime | None]
    triaged_by: Mapped[str | None] = mapped_column(String(100), doc="the token name of the last triage")
    assignee: Mapped[str | None] = mapped_column(String(100))
    bug: Mapped[str | None] = mapped_column(String(500), doc="an issue URL or reference (e.g. #123, PROJ-7)")

    cases: Mapped[list[AlertCase]] = relationship(
        back_populates="alert", lazy="raise", cascade="all, delete-orphan", order_by="AlertCase.id")
    also_on: Mapped[list[AlertBranch]] = relationship(
        lazy="raise", cascade="all, delete-orphan", order_by="AlertBranch.id")


class AlertBranch(Base):
    """Another tracked branch that reached the alert's culprit (one alert per change): that
    branch's measured heads around the step. The alert's own branch is `tracked_branch_id`."""

    __tablename__ = "alert_branches"
    __table_args__ = (UniqueConstraint("alert_id", "tracked_branch_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"))
    tracked_branch_id: Mapped[int] = mapped_column(ForeignKey("tracked_branches.id", ondelete="CASCADE"), index=True)
    before_sha: Mapped[str] = mapped_column(String(64))
    last_sha: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AlertChange(Base):
    """One field of an alert changed by a person (PATCH /api/alerts): the triage history."""

    __tablename__ = "alert_changes"

    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    by: Mapped[str] = mapped_column(String(100))
    field: Mapped[str] = mapped_column(String(20))  # status | assignee | bug | note
    old: Mapped[str | None] = mapped_column(Text)
    new: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text, doc="why, as the person said (required for a bulk change)")


class AlertCase(Base):
    """One case's step inside an alert (Perfherder's alert)."""

    __tablename__ = "alert_cases"
    __table_args__ = (UniqueConstraint("alert_id", "case_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"), index=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id", ondelete="CASCADE"))
    kind: Mapped[AlertKind] = mapped_column(_enum(AlertKind))
    rel: Mapped[float | None] = mapped_column(Float)
    pvalue: Mapped[float | None] = mapped_column(Float)
    mean_before: Mapped[float | None] = mapped_column(Float)
    mean_after: Mapped[float | None] = mapped_column(Float)

    alert: Mapped[Alert] = relationship(back_populates="cases", lazy="raise")
    case: Mapped[Case] = relationship(lazy="raise")

