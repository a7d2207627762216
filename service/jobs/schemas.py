from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from perfbisect.service.attribution.schemas import AttributionRead, FixCheckRead
from perfbisect.service.bisect.coverage import DEFAULT_MAX_GAP
from perfbisect.service.bounds import Id, text
from perfbisect.service.toolchains import rules as toolchain_rules
from perfbisect.service.job_spec import BisectSpec, CompareSpec, SpecField, Toolchain, shared_fields
from perfbisect.service.job_spec import load as load_spec
from perfbisect.service.settings import get_settings
from perfbisect.service.suites.schemas import Benchmark, SetName, Shapes, Target

Ref = text(255, min_length=1)  # validated as a git ref (never an option) before git sees it
RepositoryName = text(100, min_length=1)
DeviceClass = text(40, pattern=r"^[a-z0-9_-]{1,40}$")


def _from_settings(name: str) -> dict[str, Any]:
    """A request field's default, read from Settings (PERFBISECT_<NAME>) when a request is parsed,
    not when this module is imported; the OpenAPI document shows the deployment's value."""
    def schema(field: dict[str, Any]) -> None:
        field["default"] = getattr(get_settings(), name)
    return {"default_factory": lambda: getattr(get_settings(), name), "json_schema_extra": schema}


# A range over AUTO_SCAN_ABOVE commits has AUTO_SCAN interior revisions measured with its ends
# unless the request says otherwise (BisectCreate.scan).
AUTO_SCAN, AUTO_SCAN_ABOVE = 3, 32
MAX_SCAN = 32  # a fixed scan's points; more is --scan auto's job (it sizes them to the range)


class HarnessPolicy(BaseModel):
    """Overrides of the harness's sample policy (kernels/harness/trial.py DEFAULT_POLICY and the
    CPU `threads`); an unknown key is refused, and every value is bounded so a trial ends."""

    model_config = ConfigDict(extra="forbid")

    min_samples: int | None = Field(default=None, ge=1, le=10_000, description="samples before the noise rule")
    max_samples: int | None = Field(default=None, ge=1, le=10_000)
    max_time_s: float | None = Field(default=None, gt=0, le=60, description="per case, once min_samples are in")
    rel_noise: float | None = Field(default=None, gt=0, lt=1, description="stop when the median's noise is under")
    warmup: int | None = Field(default=None, ge=0, le=1000)
    throttle_fraction: float | None = Field(default=None, ge=0, le=1, description="of the max SM clock")
    threads: int | None = Field(default=None, ge=1, le=256, description="CPU threads")
    balance_factor: float | None = Field(default=None, ge=0, le=1000, description=(
        "when one of target and control takes over this many times the other per call, the faster is called "
        "repeatedly within each sample (0: never)"))

    @model_validator(mode="after")
    def _min_not_above_max(self) -> HarnessPolicy:
        if self.min_samples is not None and self.max_samples is not None and self.min_samples > self.max_samples:
            raise ValueError("min_samples is above max_samples")
        return self


class ToolchainAsk(BaseModel):
    """`toolchain` of a bisect: a package and its versions as listed, or a range of the
    wheelhouse's (service/toolchains/rules.py); a string is read as `--toolchain` writes it
    ("tinyop==1.0,2.0", "tinyop>=1.0,<=2.0", "tinyop")."""

    model_config = ConfigDict(extra="forbid")

    package: text(64, min_length=1)
    versions: list[text(40, min_length=1)] = Field(default=[], max_length=toolchain_rules.MAX_VERSIONS,
                                                   description="in bisect order, oldest first")
    specifier: text(200) = Field(default="", description="with no versions: a PEP 440 range of the "
                                 "wheelhouse's versions (\"\": all of them)")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            ask = toolchain_rules.parse(value)
            return {"package": ask.package, "versions": list(ask.versions), "specifier": ask.specifier}
        return value

    @model_validator(mode="after")
    def _well_formed(self) -> ToolchainAsk:
        self.rules()  # raises ToolchainError, a ValueError: a 422
        return self

    def rules(self) -> toolchain_rules.Ask:
        """The pure rules' Ask, checked as `--toolchain` text is."""
        return toolchain_rules.parse(str(toolchain_rules.Ask(self.package, tuple(self.versions), self.specifier)))


class BisectCreate(BaseModel):
    repository: RepositoryName = Field(description="name of a registered repository")
    good: Ref = Field(examples=["v1.0"], description="a ref where performance was good")
    bad: Ref = Field(examples=["main"], description="a later ref where it is bad")
    suite: text(200, min_length=1) | None = None
    target: Target | None = None
    shapes: Shapes | None = None
    benchmarks: list[Benchmark] | None = Field(default=None, min_length=1, max_length=32,
                                               description="several suites in one job")
    device_class: DeviceClass = Field(default="cpu", examples=["cpu", "cuda"],
                                      description="one of the classes workers serve (PERFBISECT_DEVICE_CLASSES)")
    min_effect: float = Field(gt=0, lt=1, description="smallest relative step that counts",
                              **_from_settings("default_min_effect"))
    metric: Literal["ratio", "raw"] = Field(default="ratio", description="control ratio (default) or raw metric")
    workers: int = Field(ge=1, le=64, description="revisions measured per round", **_from_settings("default_workers"))
    max_trials: int | None = Field(default=None, ge=5, le=100, description="5 is the fewest that can reach p < 0.01")
    policy: HarnessPolicy | None = Field(default=None, description="harness sample policy override")
    benchmark_set: SetName | None = Field(default=None, description="a benchmark set registered on the repository: "
                                          "its suites, targets and shape presets")
    check_accuracy: bool = Field(default=False, description="also check accuracy at every revision of the range "
                                 "(accuracy-only trials, no timing loop, run side by side with the search)")
    scan: Annotated[int, Field(ge=0, le=MAX_SCAN)] | Literal["auto"] | None = Field(default=None, description=(
        "interior revisions measured, evenly spaced, with the ends in the first round, so that a step undone "
        f"inside the range is seen (0 to {MAX_SCAN}); \"auto\": as many as leave no stretch between measured revisions "
        f"wider than max_gap commits, and finer ones beside a step seen; default {AUTO_SCAN} for ranges over "
        f"{AUTO_SCAN_ABOVE} commits, else 0"))
    max_gap: int | None = Field(default=None, ge=1, le=10_000, description=(
        f"with scan \"auto\": the widest stretch of commits left between measured revisions (default "
        f"{DEFAULT_MAX_GAP}: a step that lasts that many commits is seen wherever it sits)"))
    side_by_side: bool = Field(default=True, description=(
        "confirm a culprit only on side-by-side blocks (its two revisions measured A B B A on one worker), so drift "
        "the control does not cancel cannot make one; false: on all the pair's trials, as before issue 23"))
    evidence: bool = Field(default=False, description=(
        "once the culprits are known, run one profiled trial at each end of every culprit (torch.profiler, the "
        "Triton JIT cache, the autotuner's choice): the evidence of why it got slower "
        "(GET /api/jobs/{id}/culprits/{sha}/evidence); profiled trials never enter the timing statistics"))
    attribute: bool | None = Field(default=None, description="after the bisect, measure the bad end with its culprits "
                                   "reverted: None (default) when two or more culprits moved one case, true for any "
                                   "culprit, false never")
    localize: bool = Field(default=False, description=(
        "after the bisect (and its attribution), search each performance culprit's diff for the hunks that carry its "
        "step: subsets of its hunks applied to its parent, side by side with the culprit (issue 43)"))
    descend: bool | None = Field(default=None, description="when a culprit moves a declared dependency's pin, bisect "
                                 "inside the dependency's range; in a toolchain bisect, when the host declares the "
                                 "package as a dependency, bisect between the moving version's and the previous "
                                 "version's tagged commits (default true; false never)")
    toolchain: ToolchainAsk | None = Field(default=None, description=(
        "a toolchain bisect (issue 44): bisect prebuilt versions of a package, installed from `wheelhouse`, at "
        "one commit of the repository (`good`; `bad`, if it differs, must name the same commit); the culprit is "
        "the first version that moves, then (`descend`) the commit inside the package's declared repository. Needs "
        "the admin scope (a wheel is code the workers run)"),
        examples=["triton==3.4.0,3.5.0,3.6.0", {"package": "triton", "specifier": ">=3.4,<=3.6"}])
    wheelhouse: text(1000, min_length=1) | None = Field(default=None, description=(
        "with toolchain: an absolute path to a directory of wheels that the API and the workers read (the workers "
        "have no network)"))

    @model_validator(mode="after")
    def _one_form(self) -> BisectCreate:
        single = (self.suite, self.target, self.shapes)
        given = [any(v is not None for v in single), bool(self.benchmarks), self.benchmark_set is not None]
        if sum(given) > 1:
            raise ValueError("give one of suite/target/shapes, benchmarks or benchmark_set, not several")
        if given[0]:
            if any(v is None for v in single):
                raise ValueError("suite, target and shapes are required (or give benchmarks or benchmark_set)")
            self.benchmarks = [Benchmark(suite=self.suite, target=self.target, shapes=self.shapes)]
            self.suite = self.target = self.shapes = None
        elif not any(given):
            raise ValueError("suite, target and shapes are required (or give benchmarks or benchmark_set)")
        if self.max_gap is not None and self.scan != "auto":
            raise ValueError("max_gap goes with scan \"auto\" (--scan auto --max-gap N)")
        self._toolchain_alone()
        return self

    def _toolchain_alone(self) -> None:
        """A toolchain bisect has a wheelhouse, and none of what reads its culprits as commits."""
        if (self.wheelhouse is not None) != (self.toolchain is not None):
            raise ValueError("toolchain and wheelhouse go together (--toolchain PACKAGE==V1,V2 --wheelhouse DIR)")
        if self.toolchain is None:
            return
        if not self.wheelhouse.startswith("/"):
            raise ValueError(f"wheelhouse {self.wheelhouse!r} is not an absolute path")
        asked = [name for name, on in (("attribute", self.attribute), ("localize", self.localize),
                                       ("evidence", self.evidence)) if on]
        if asked:
            raise ValueError(f"a toolchain bisect's culprits are versions, not commits: {', '.join(asked)} does not "
                             "apply to them")

    def to_spec(self, cases: list[dict[str, Any]], max_trials: int, toolchain: Toolchain | None = None) -> BisectSpec:
        """The job's spec: this request's fields of the same names, the resolved `cases`, and
        `max_trials` when the request gave none (Settings)."""
        fields = shared_fields(self, BisectSpec, exclude={"policy", "attribute", "max_trials", "max_gap", "evidence",
                                                          "localize", "descend", "toolchain"})
        policy = self.policy.model_dump(exclude_none=True) if self.policy else None
        extra = {"attribute": self.attribute} if self.attribute is not None else {}  # None: unset, as before
        if self.descend is not None:
            extra["descend"] = self.descend
        if self.max_gap is not None:  # stored only when given
            extra["max_gap"] = self.max_gap
        if self.evidence:  # stored only when asked for, as before issue 43
            extra["evidence"] = True
        if self.localize:  # stored only when asked for: a stored bisect without it never localizes
            extra["localize"] = True
        if toolchain is not None:  # its culprits are versions: nothing reverts them (a descent goes to their commits)
            extra |= {"toolchain": toolchain, "attribute": False}
        return BisectSpec(**fields, cases=cases, max_trials=self.max_trials or max_trials, policy=policy, **extra)


class CompareCreate(BaseModel):
    """A pull request: its base against its head."""

    repository: RepositoryName
    base: Ref
    head: Ref
    benchmarks: list[Benchmark] | None = Field(default=None, min_length=1, max_length=32)
    benchmark_set: SetName | None = Field(default=None, description="instead of benchmarks: a set registered on the repository")
    device_class: DeviceClass = "cpu"
    min_effect: float = Field(gt=0, lt=1, **_from_settings("default_min_effect"))
    metric: Literal["ratio", "raw"] = "ratio"
    pr_number: Id | None = None
    merge_base: bool = Field(default=False, description=(
        "measure the head against the merge base of head and base (what a pull request changes), not the base "
        "itself: steps the base branch made since the head branched off are not the head's"))
    side_by_side: bool = Field(default=True, description=(
        "measure base and head side by side (A B B A blocks on one worker) and decide on the within-block "
        "differences, so drift the control does not cancel cannot fail or pass the gate; false: separate trials"))
    evidence: bool = Field(default=False, description=(
        "once the culprits are known, run one profiled trial at each end of every culprit (torch.profiler, the "
        "Triton JIT cache, the autotuner's choice): the evidence of why it got slower "
        "(GET /api/jobs/{id}/culprits/{sha}/evidence); profiled trials never enter the timing statistics"))

    @model_validator(mode="after")
    def _one_form(self) -> CompareCreate:
        if (self.benchmarks is None) == (self.benchmark_set is None):
            raise ValueError("give benchmarks or benchmark_set, not both or neither")
        return self

    def to_spec(self, cases: list[dict[str, Any]], max_trials: int) -> CompareSpec:
        """The job's spec: the base is its good end, the head its bad one; two revisions a round."""
        extra = {"merge_base": True} if self.merge_base else {}  # stored only when asked for, as before
        extra |= {"evidence": True} if self.evidence else {}
        return CompareSpec(**shared_fields(self, CompareSpec, exclude={"merge_base", "evidence"}), good=self.base, bad=self.head,
                           cases=cases, workers=2, max_trials=max_trials, policy=None, **extra)


class CaseEffectRead(BaseModel):
    rel: float
    ci: tuple[float, float]
    before: float
    after: float
    unit: str | None = None
    before_value: float | None = None
    after_value: float | None = None
    control_step: float | None = Field(default=None, description=(
        "the control's own step here when it moved (the same code at both revisions: what ran beside it "
        "changed); `rel` and `ci` are then the step of the target's own metric, not of the ratio"))
    confirmed: bool = Field(default=True, description=(
        "false when the case's own verdict at this culprit is not DIFFERENT (its noise raised the smallest step "
        "this job can tell on it above this one, or its trials are ambiguous): the step is shown, never counted"))


class WrongCaseRead(BaseModel):
    """A case that failed the accuracy check at a correctness culprit."""

    error: float | None = Field(default=None, description="the largest relative error seen")
    tolerance: float | None = Field(default=None, description="the suite's tolerance it broke")
    message: str | None = None


class CulpritRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    kind: str
    first_sha: str
    last_sha: str
    fixed_sha: str | None
    exact: bool
    subject: str | None = None
    pr_number: int | None = None
    effects: dict[str, CaseEffectRead] = {}
    wrong_cases: dict[str, WrongCaseRead] = Field(
        default={}, description="correctness: the cases that failed the accuracy check (others keep their timing)")
    why: list[str] = Field(default=[], description=(
        "a job run with evidence: why it got slower, one line per kind (the kernel that carries the step, the "
        "compiled code, the autotuner's choice, the environment) or why that kind is missing"))
    evidence_url: str | None = Field(default=None, description="the full evidence (GET): kernel table, "
                                     "metadata and op-count tables, the TTGIR diff")


class StepRead(BaseModel):
    first_sha: str
    last_sha: str
    rel: float
    ci: tuple[float, float]
    regression: bool


class GapRead(BaseModel):
    """The widest stretch between two adjacent measured revisions: what an unchanged verdict covers."""

    after_sha: str = Field(description="the measured revision before the stretch")
    before_sha: str = Field(description="the measured revision after it")
    commits: int = Field(description="commits after_sha+1..before_sha: a step undone within them would not be seen")
    unseen: int = Field(description="revisions strictly between the two, none measured")


class CaseOutcomeRead(BaseModel):
    case: str
    outcome: Literal["regressed", "improved", "unchanged", "inconclusive", "failed"]
    reason: str | None = Field(default=None, description="why (failed, inconclusive), or a note")
    error: str | None = Field(default=None, description="the failed end's error: last lines of its log")
    failed_at: str | None = Field(default=None, description="sha of the end that failed")
    bound: float | None = Field(default=None, description="unchanged: no step beyond this relative size")
    ci: tuple[float, float] | None = Field(default=None, description="95% CI of the end-to-end step")
    steps: list[StepRead] = []
    unseen: int = Field(default=0, description="unchanged: the most consecutive revisions not measured between "
                        "two measured ones (a step undone among them would not be seen; --scan auto, or the tracked "
                        "history)")
    gap: GapRead | None = Field(default=None, description="unchanged: the widest unmeasured stretch (None: every "
                                "revision of the range was measured)")


class NoiseRead(BaseModel):
    case: str
    noise: float | None = Field(description="sd of log of one trial's decision value")
    control_spread: float | None = Field(description="sd of log of the control's per-trial metric")
    throttled: int
    samples: int
    detectable: float = Field(description="smallest relative step this run could tell from noise")
    noisy: bool
    call_spread: float | None = Field(default=None, description="sd of log of one call's time within its trial, "
                                      "pooled over every trial (the spread the noisier verdict judges; issue 46)")


class FailureRead(BaseModel):
    sha: str
    reason: str
    words: str
    case: str | None = Field(description="None: the whole trial failed")
    trials: int
    error: str | None


class ShapeHistogramRead(BaseModel):
    before: list[int]
    after: list[int]
    edges: list[float] = Field(description="bin edges, log of a call's time over its trial's median")


class ShapeRead(BaseModel):
    """A step in a case's spread or shape (issue 46): its calls got noisier, or a new mode appeared."""

    kind: Literal["noisier", "bimodal"]
    case: str
    first_sha: str
    last_sha: str
    exact: bool
    before: float = Field(description="within-trial spread before (robust sd of log call time: ~ relative)")
    after: float = Field(description="within-trial spread after")
    before_ci: tuple[float, float]
    after_ci: tuple[float, float]
    ratio: float = Field(description="after / before")
    ratio_ci: tuple[float, float]
    pvalue: float = Field(description="one-sided rank test (Brown-Forsythe) that the spread rose")
    mode_share: float | None = Field(default=None, description="bimodal: the new mode's share of the calls")
    mode_location: float | None = Field(default=None, description="bimodal: where it sits relative to the main mode "
                                        "(+1.0: calls twice as slow)")
    histogram: ShapeHistogramRead | None = None


class OutcomeRead(BaseModel):
    """What the job concluded: per case and overall (failed > inconclusive > regressed > improved > unchanged)."""

    verdict: Literal["regressed", "improved", "unchanged", "inconclusive", "failed"]
    counts: dict[str, int]
    warning: str | None = Field(default=None, description="the run's noise hid steps of the minimum effect")
    waited_s: int = Field(default=0, description="seconds the job paused for a steadier machine (issue 23)")
    set_aside: int = Field(default=0, description="trials left out as measured while the machine was unsteady, "
                           "once it was steady again (their revisions were measured again)")
    gap: GapRead | None = Field(default=None, description="the widest unmeasured stretch of the unchanged cases: "
                                "\"no step\" holds only for steps that outlast it")
    cases: list[CaseOutcomeRead]
    noise: list[NoiseRead] = []
    failures: list[FailureRead] = []
    environment: dict[str, Any] | None = Field(default=None, description="device and toolchain of the trials")
    shapes: list[ShapeRead] = Field(default=[], description="noisier and bimodal findings: a case whose calls' spread "
                                    "rose, or that gained a mode, at a culprit (issue 46)")


class DescentRead(BaseModel):
    """A child bisect inside a dependency bump of one of the job's culprits (issue 44)."""

    dependency: str
    culprit_sha: str
    label: str = ""
    old: str
    new: str
    job_id: int | None = Field(default=None, description="the child bisect (None: not descended, see error)")
    url: str | None = None
    status: str | None = None
    error: str | None = None
    other_files: list[str] = Field(default=[], description="what the bump's commit changed besides the pin")
    cases: list[str] = Field(default=[], description="the cases the culprit moved: those the child measures")
    toolchain: bool = Field(default=False, description="a toolchain bisect's step: `old` and `new` are the package's "
                            "versions, the child bisects between their commits (tags)")


class JobRead(BaseModel):
    id: int
    kind: str
    status: str
    repository: str
    spec: SpecField
    progress: dict[str, Any]
    revision_shas: list[str] = Field(description="the range, good first, first-parent order")
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    culprits: list[CulpritRead]
    outcome: OutcomeRead | None = Field(default=None, description="set once the job has finished")
    attribution: AttributionRead | None = Field(
        default=None, description="an attribution job's report; on a bisect, that of its latest finished attribution")
    attribution_job_id: int | None = Field(default=None, description="a bisect's latest attribution job")
    fix_check: list[FixCheckRead] = Field(default=[], description="a compare over culprits named earlier: per case "
                                          "what the pull request recovers and what is left")
    descents: list[DescentRead] = Field(default=[], description="child bisects inside the dependency bumps of its "
                                        "culprits; a child names its parent in spec.descent.parent_job_id")
    descent_lines: list[str] = Field(default=[], description="per case, the chain down to the dependency's culprit "
                                     "or what is left outside the bump")
    parent_job_id: int | None = Field(default=None, description="a child bisect's parent (spec.descent)")

    @field_validator("spec", mode="before")
    @classmethod
    def _spec_of_kind(cls, value: Any, info: ValidationInfo) -> Any:
        """The JSON's spec carries no kind: the job's says which model it is."""
        return load_spec(value, info.data.get("kind"))


class JobSummary(BaseModel):
    """A row of the jobs list: what a list shows, without the range or the full spec (read the
    job for those)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    status: str
    repository: str
    good: str | None
    bad: str | None
    pr_number: int | None
    progress: dict[str, Any]
    error: str | None
    culprits: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    url: str


class JobAccepted(BaseModel):
    id: int
    status: str
    revisions: int
    url: str


class TrialRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    sha: str
    status: str
    device: str | None
    fingerprint: str | None
    failure_reason: str | None
    worker_host: str | None
    attempts: int
    profile: bool = Field(default=False, description="a culprit's profiled trial (issue 43): kernels and compiled "
                          "code, no measurements; GET /api/jobs/{id}/culprits/{sha}/evidence")
    block: int | None = Field(default=None, description="the side-by-side block it was measured in (issue 23): its "
                              "two revisions run A B B A on one worker; null: an unpaired trial")
    block_slot: int | None = Field(default=None, description="its place in the block's A B B A order (0..3), or in a search probe's short block: reference, probe (0..1)")
    build_s: float | None
    build_cache: dict[str, Any] | None = Field(
        default=None, description="what the build cache did (key, cached, built_for, stored, note: \"cached (key ..., "
        "built for <sha> in 12.3 s)\" or \"built in 12.3 s, cached as key ...\"); null where the repository declares "
        "no build inputs")
    run_s: float | None
    phases: dict[str, float] | None = None  # seconds: checkout, build, start, import, compile, ...
    samples_pruned_at: datetime | None = Field(
        default=None, description="when the raw samples were deleted past the retention (`samples` is then null)")
    measurements: dict[str, dict[str, Any]]
