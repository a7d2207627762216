"""What a job was asked to do: one Pydantic model per job kind, stored in `jobs.spec` through
`SpecType`, which dumps the model on write and validates it on read (polar's `kit/address.py`
`AddressType`). The rest of the code reads a spec by attribute, never by string key (a test
greps for it).

Built from the request, never by hand: `BisectCreate.to_spec` and `CompareCreate.to_spec`
(service/jobs/schemas.py) copy the request's fields that the spec shares by name
(`shared_fields`), `AttributeSpec.of_bisect` the bisect's, and every default of a new job comes
from the request schema, which takes it from Settings once (`PERFBISECT_DEFAULT_MIN_EFFECT`,
`PERFBISECT_DEFAULT_WORKERS`, `PERFBISECT_MAX_TRIALS_PER_REVISION`). This module imports nothing
of the service, so the tables (service/models.py) and every domain may import it.

Stored rows keep loading. A field's default here is what the code read for a row that lacks it
(the rows written before the field existed), never a setting: a stored job's parameters do not
move when the deployment's settings do. Only the fields that were set are written
(`exclude_unset`), so a row holds what it was given, as before this module.

To add a field (say a compare's `merge_base`): declare it on the kind's model with the default
an old row must read as; when the request schema has a field of the same name,
`CompareCreate.to_spec` (or `BisectCreate.to_spec`) copies it; otherwise pass it where the spec is
built or updated (`spec.updated(...)`). Then add one literal to tests/test_job_spec.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (BaseModel, ConfigDict, Discriminator, PlainSerializer, PlainValidator, Tag, TypeAdapter,
                      WithJsonSchema)
from sqlalchemy import JSON
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

Metric = Literal["ratio", "raw"]
# The trial cap read for a stored bisect or attribution that never wrote one (before it was
# written; new jobs take PERFBISECT_MAX_TRIALS_PER_REVISION).
STORED_MAX_TRIALS = 12
TRIALS_PER_HEAD = 3  # a track job that never wrote its trials per head


class SuiteSource(BaseModel):
    """A suite file sent with the job, shown with it: which file, by content hash."""

    model_config = ConfigDict(frozen=True)

    suite: str
    sha256: str
    bytes: int


class _Spec(BaseModel):
    """Fields every kind has. Frozen: a change is a new spec assigned to `job.spec`, which is
    what SQLAlchemy sees (an in-place change of a JSON value is not). Unknown keys are kept, so a
    row written by a newer version survives a rewrite by an older one."""

    model_config = ConfigDict(frozen=True, extra="allow")

    good: str | None = None  # the refs as given
    bad: str | None = None
    good_sha: str | None = None  # None until resolved (service/jobs/resolution.py)
    bad_sha: str | None = None
    cases: list[dict[str, Any]] = []  # resolved cases: suite, target, params, name (suites.service)
    device_class: str = "cpu"
    min_effect: float = 0.0  # every job the service built has one; rows from tests may not
    metric: Metric = "ratio"
    policy: dict[str, Any] | None = None  # the harness sample policy override (schemas.HarnessPolicy)
    suite_sources: list[SuiteSource] | None = None

    @property
    def resolved(self) -> bool:
        return self.good_sha is not None

    def case_names(self) -> list[str]:
        return [c["name"] for c in self.cases]

    def updated(self, *, unset: Sequence[str] = (), **fields: Any) -> Self:
        """A copy with `fields` changed and the fields named in `unset` back to their defaults
        (and no longer stored), validated (`model_copy` does not validate)."""
        kept = {k: v for k, v in self.stored().items() if k not in unset}
        return type(self).model_validate({**kept, **fields})

    def stored(self) -> dict[str, Any]:
        """The JSON of the row (and of the API's `spec`): the fields that were set, without `kind`,
        which is the job's own column."""
        return self.model_dump(mode="json", exclude_unset=True, exclude={"kind"})


class _SearchSpec(_Spec):
    """A job the planner decides over a range (a bisect; a compare is a range of two)."""

    workers: int = 1
    max_trials: int = STORED_MAX_TRIALS
    scan: int | Literal["auto"] | None = None  # None: service.jobs.schemas.AUTO_SCAN for long ranges
    max_gap: int | None = None  # with scan "auto": the widest unmeasured stretch (None: DEFAULT_MAX_GAP)
    check_accuracy: bool = False  # the correctness sweep (service/jobs/sweep.py)
    side_by_side: bool = False  # jobs from before issue 23 decided on all trials
    evidence: bool = False  # a profiled trial at each end of every culprit (issue 43; service/evidence)


class Descent(BaseModel):
    """A bisect inside a dependency bump (issue 44): the job's repository is the dependency, its
    range the bump's old pin .. new pin; every trial measures the host repository at `host_sha`
    with the dependency (`dependency`: its path of names from the host, "minicc" or
    "minicc/minilib") at the trial's revision, and the outer dependencies at `fixed`."""

    model_config = ConfigDict(frozen=True)

    parent_job_id: int
    level: int = 1  # 1: a dependency of the host; 2: a dependency of that dependency
    host_repository_id: int
    host_sha: str
    dependency: str
    culprit_sha: str  # the parent's culprit that moved the pin
    label: str = ""  # the parent culprit's label ("#945")
    old_pin: str = ""
    new_pin: str = ""
    fixed: dict[str, str] = {}  # outer dependencies' paths of names -> the commit they stay at


class Toolchain(BaseModel):
    """A toolchain bisect (issue 44): the job's revisions are versions of `package`, in order
    (labelled "package==version", service/toolchains/rules.py), each installed from the wheels of
    `wheelhouse` (a directory the workers read) and measured with the repository at `commit`."""

    model_config = ConfigDict(frozen=True)

    package: str
    versions: list[str]
    wheelhouse: str
    commit: str | None = None  # None until the ref resolves (service/jobs/resolution.py)


class BisectSpec(_SearchSpec):
    kind: Literal["bisect"] = "bisect"
    attribute: bool | None = None  # None: attribute when two culprits moved one case
    alert_id: int | None = None  # the alert this bisect was started for
    localize: bool = False  # search each performance culprit's hunks afterwards (service/hunks, issue 43)
    descent: Descent | None = None  # a child bisect inside a dependency bump of `descent.parent_job_id`
    descend: bool = True  # start those children when a culprit bumps a declared dependency
    toolchain: Toolchain | None = None  # its revisions are versions of a package at one commit


class CompareSpec(_SearchSpec):
    kind: Literal["compare"] = "compare"
    pr_number: int | None = None
    kernel_paths_pending: bool = False  # a PR's touched cases are added once its range resolves
    merge_base: bool = False  # measured against the merge base of head and base (a PR's compare)
    base_tip_sha: str | None = None  # with merge_base: the base as given, when it is not the merge base


class Remeasure(BaseModel):
    """A suspected step's two heads, measured side by side by a track job."""

    model_config = ConfigDict(frozen=True)

    before: str
    after: str


class TrackSpec(_Spec):
    kind: Literal["track"] = "track"
    tracked_branch_id: int | None = None
    branch: str | None = None
    trials_per_head: int = TRIALS_PER_HEAD
    remeasure: Remeasure | None = None


class RevertedCulprit(BaseModel):
    model_config = ConfigDict(frozen=True)

    first_sha: str
    last_sha: str
    label: str = ""
    subject: str = ""


class AttributeSpec(_Spec):
    """The bad end of bisect `parent_job_id` with its culprits reverted (service/attribution)."""

    kind: Literal["attribute"] = "attribute"
    parent_job_id: int | None = None
    max_trials: int = STORED_MAX_TRIALS
    culprits: list[RevertedCulprit] = []
    case_culprits: dict[str, list[int]] = {}  # per case, the indices of the culprits that moved it
    variants: list[str] = []  # service.bisect.attribution.variant_key of each variant measured
    side_by_side: bool = False

    @classmethod
    def of_bisect(cls, parent: BisectSpec, **fields: Any) -> AttributeSpec:
        """The parent's measuring parameters (device, threshold, metric, policy, trial cap,
        side by side) at its bad end, with the attribution's own `fields`."""
        shared = parent.model_dump(include={"device_class", "min_effect", "metric", "policy", "max_trials",
                                            "side_by_side"})
        return cls(good_sha=parent.bad_sha, bad_sha=parent.bad_sha, good=parent.bad, bad=parent.bad,
                   **shared, **fields)


class SpecHunk(BaseModel):
    """One hunk of a culprit's diff as stored (service/bisect/hunks.py:Hunk)."""

    model_config = ConfigDict(frozen=True)

    index: int
    path: str
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[str]
    header: list[str]
    section: str = ""


class LocalizeTarget(BaseModel):
    """One confirmed culprit to localize: its diff's kept hunks (the files its trials imported),
    what was set aside and why, the cases it moved with their step (log of the decision value,
    after over before), or why it is not searched (`skipped`: no evidence of this kind)."""

    model_config = ConfigDict(frozen=True)

    label: str
    first_sha: str
    last_sha: str
    parent_sha: str | None = None
    commits: int = 1
    cases: dict[str, float] = {}
    hunks: list[SpecHunk] = []
    set_aside: list[dict[str, str]] = []
    complete: bool = True
    skipped: str | None = None


class LocalizeSpec(_Spec):
    """The hunks of bisect `parent_job_id`'s culprits that carry their steps (service/hunks)."""

    kind: Literal["localize"] = "localize"
    parent_job_id: int | None = None
    max_trials: int = STORED_MAX_TRIALS
    targets: list[LocalizeTarget] = []
    budget: int | None = None  # rounds per culprit (None: service/bisect/hunks.py's default)


def toolchain_of(spec: Any) -> Toolchain | None:
    """A toolchain bisect's axis, None for any other job."""
    return spec.toolchain if isinstance(spec, BisectSpec) else None


def descent_of(spec: Any) -> Descent | None:
    """A bisect's descent (a child inside a dependency bump), None for any other job."""
    return spec.descent if isinstance(spec, BisectSpec) else None


JobSpec = BisectSpec | CompareSpec | TrackSpec | AttributeSpec | LocalizeSpec
MODELS: dict[str, type[_Spec]] = {"bisect": BisectSpec, "compare": CompareSpec, "track": TrackSpec,
                                  "attribute": AttributeSpec, "localize": LocalizeSpec}  # by JobKind value


def _legacy_kind(value: dict[str, Any]) -> str:
    """The kind of a row written before specs carried one: the keys only one kind ever wrote."""
    if "tracked_branch_id" in value:
        return "track"
    if "parent_job_id" in value:
        return "attribute"
    return "compare" if "pr_number" in value else "bisect"


def _kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return value.get("kind") or _legacy_kind(value)
    return getattr(value, "kind", "bisect")


_Tagged = Annotated[
    Annotated[BisectSpec, Tag("bisect")] | Annotated[CompareSpec, Tag("compare")]
    | Annotated[TrackSpec, Tag("track")] | Annotated[AttributeSpec, Tag("attribute")]
    | Annotated[LocalizeSpec, Tag("localize")],
    Discriminator(_kind_of)]
_ADAPTER: TypeAdapter[JobSpec] = TypeAdapter(_Tagged)


def _json_of(spec: JobSpec) -> dict[str, Any]:
    return spec.stored()


# A spec in an API schema (JobRead.spec): the stored JSON, an object in the OpenAPI document as
# it was when specs were dicts (validated by `load` alone, so the models add no schema of their
# own to the document). A dict without a kind needs the job's: see JobRead.
if TYPE_CHECKING:
    SpecField = JobSpec
else:
    SpecField = Annotated[Any, PlainValidator(lambda value: load(value)),
                          PlainSerializer(_json_of, return_type=dict[str, Any]),
                          WithJsonSchema({"type": "object", "additionalProperties": True})]


def load(value: dict[str, Any] | JobSpec, kind: str | None = None) -> JobSpec:
    """The typed spec of a stored (or hand-made) dict; `kind`, the job's, wins over the dict's
    own. A model is returned as it is when of that kind. Raises pydantic.ValidationError."""
    if isinstance(value, _Spec):
        if kind is None or value.kind == kind:
            return value
        value = value.stored()
    return _ADAPTER.validate_python({**value, "kind": kind} if kind else value)


def dump(spec: JobSpec) -> dict[str, Any]:
    """The row's JSON: the fields that were set, and the kind."""
    return {**spec.stored(), "kind": spec.kind}


class SpecType(TypeDecorator):
    """jobs.spec: JSON (JSONB on PostgreSQL) holding a JobSpec."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect):
        return dialect.type_descriptor(JSONB() if dialect.name == "postgresql" else JSON())

    def process_bind_param(self, value: JobSpec | dict[str, Any] | None, dialect) -> dict[str, Any] | None:
        return None if value is None else dump(load(value))

    def process_result_value(self, value: dict[str, Any] | None, dialect) -> JobSpec | None:
        return None if value is None else load(value)


def field(column: Any, name: str) -> Any:
    """`column[name]`, a JSON path for SQL filters on the spec (`.as_integer()`, `.as_string()`):
    `name` must be a field of some kind's model, so a misspelt key fails at once, not as an
    always-NULL filter."""
    if not any(name in model.model_fields for model in MODELS.values()):
        raise KeyError(f"no job spec has a field {name!r}")
    return column[name]


def shared_fields(request: BaseModel, model: type[_Spec], *, exclude: set[str] = frozenset()) -> dict[str, Any]:
    """The request's values of the fields `model` has too (by name): what a new spec copies from
    its request, so a field added to both travels without an edit (BisectCreate.to_spec)."""
    names = (set(type(request).model_fields) & set(model.model_fields)) - exclude - {"kind"}
    return request.model_dump(include=names)
