from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Shape = dict[str, Any] | str


class Benchmark(BaseModel):
    """One suite and target, with the shapes that matter."""

    suite: str = Field(examples=["gemm"], description="gemm, attention, rmsnorm or file:path/in/repo.py")
    target: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$", examples=["minikern.gemm:matmul"])
    shapes: list[Shape] = Field(min_length=1, examples=[["M=512,N=512,K=512,dtype=fp32"]])


class BisectCreate(BaseModel):
    repository: str = Field(description="name of a registered repository")
    good: str = Field(examples=["v1.0"], description="a ref where performance was good")
    bad: str = Field(examples=["main"], description="a later ref where it is bad")
    suite: str | None = None
    target: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    shapes: list[Shape] | None = Field(default=None, min_length=1)
    benchmarks: list[Benchmark] | None = Field(default=None, description="several suites in one job")
    device_class: str = Field(default="cpu", pattern=r"^[a-z0-9_-]{1,40}$", examples=["cpu", "cuda", "h200"])
    min_effect: float = Field(default=0.02, gt=0, lt=1, description="smallest relative step that counts")
    metric: Literal["ratio", "raw"] = Field(default="ratio", description="control ratio (default) or raw metric")
    workers: int = Field(default=1, ge=1, le=64, description="revisions measured per round")
    max_trials: int | None = Field(default=None, ge=5, le=100, description="5 is the fewest that can reach p < 0.01")
    policy: dict[str, Any] | None = Field(default=None, description="harness sample policy override")
    check_accuracy: bool = Field(default=False, description="also check accuracy at every revision of the range "
                                 "(accuracy-only trials, no timing loop, run side by side with the search)")

    @model_validator(mode="after")
    def _one_form(self) -> BisectCreate:
        single = (self.suite, self.target, self.shapes)
        if self.benchmarks and any(v is not None for v in single):
            raise ValueError("give either suite/target/shapes or benchmarks, not both")
        if not self.benchmarks:
            if any(v is None for v in single):
                raise ValueError("suite, target and shapes are required (or give benchmarks)")
            self.benchmarks = [Benchmark(suite=self.suite, target=self.target, shapes=self.shapes)]
            self.suite = self.target = self.shapes = None
        return self


class CompareCreate(BaseModel):
    """A pull request: its base against its head."""

    repository: str
    base: str
    head: str
    benchmarks: list[Benchmark] = Field(min_length=1)
    device_class: str = Field(default="cpu", pattern=r"^[a-z0-9_-]{1,40}$")
    min_effect: float = Field(default=0.02, gt=0, lt=1)
    metric: Literal["ratio", "raw"] = "ratio"
    pr_number: int | None = None


class CaseEffectRead(BaseModel):
    rel: float
    ci: tuple[float, float]
    before: float
    after: float
    unit: str | None = None
    before_value: float | None = None
    after_value: float | None = None


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


class StepRead(BaseModel):
    first_sha: str
    last_sha: str
    rel: float
    ci: tuple[float, float]
    regression: bool


class CaseOutcomeRead(BaseModel):
    case: str
    outcome: Literal["regressed", "improved", "unchanged", "inconclusive", "failed"]
    reason: str | None = Field(default=None, description="why (failed, inconclusive), or a note")
    error: str | None = Field(default=None, description="the failed end's error: last lines of its log")
    failed_at: str | None = Field(default=None, description="sha of the end that failed")
    bound: float | None = Field(default=None, description="unchanged: no step beyond this relative size")
    ci: tuple[float, float] | None = Field(default=None, description="95% CI of the end-to-end step")
    steps: list[StepRead] = []


class NoiseRead(BaseModel):
    case: str
    noise: float | None = Field(description="sd of log of one trial's decision value")
    control_spread: float | None = Field(description="sd of log of the control's per-trial metric")
    throttled: int
    samples: int
    detectable: float = Field(description="smallest relative step this run could tell from noise")
    noisy: bool


class FailureRead(BaseModel):
    sha: str
    reason: str
    words: str
    case: str | None = Field(description="None: the whole trial failed")
    trials: int
    error: str | None


class OutcomeRead(BaseModel):
    """What the job concluded: per case and overall (failed > inconclusive > regressed > improved > unchanged)."""

    verdict: Literal["regressed", "improved", "unchanged", "inconclusive", "failed"]
    counts: dict[str, int]
    warning: str | None = Field(default=None, description="the run's noise hid steps of the minimum effect")
    cases: list[CaseOutcomeRead]
    noise: list[NoiseRead] = []
    failures: list[FailureRead] = []
    environment: dict[str, Any] | None = Field(default=None, description="device and toolchain of the trials")


class JobRead(BaseModel):
    id: int
    kind: str
    status: str
    repository: str
    spec: dict[str, Any]
    progress: dict[str, Any]
    revision_shas: list[str] = Field(description="the range, good first, first-parent order")
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    culprits: list[CulpritRead]
    outcome: OutcomeRead | None = Field(default=None, description="set once the job has finished")


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
    build_s: float | None
    run_s: float | None
    measurements: dict[str, dict[str, Any]]
