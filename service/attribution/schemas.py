"""The attribution report as the API serves it (job.result["attribution"], see report.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class EstimateRead(BaseModel):
    rel: float = Field(description="relative change of the decision value (exp of the log effect, minus 1)")
    ci: tuple[float, float] = Field(description="95% interval, Student's t on the standard error `paired` says")
    paired: bool = Field(default=False, description=(
        "true: paired, on the within-block differences of each variant against the bad end of its own side-by-side "
        "blocks (the bisect's paired standard error; drift between blocks cancels); false: pooled over every trial "
        "of the arms (no complete side-by-side block, e.g. a job from before blocks), per-trial noise pooled over "
        "the arms"))


class ArmRead(BaseModel):
    ratio: float | None = Field(description="median of the per-trial ratios to the control")
    value: float | None = Field(description="median of the per-trial metric (TFLOP/s, GB/s)")
    trials: int


class RecoveryRead(EstimateRead):
    variant: str = Field(description="the culprit indices reverted together, e.g. '0+1'")
    culprits: list[int]
    ratio: float | None
    value: float | None
    metric: EstimateRead | None = Field(
        default=None, description="the same recovery on the metric itself (TFLOP/s, GB/s), with its interval")
    trials: int
    blocks: int = Field(default=0, description="side-by-side blocks the recovery is paired on (0: pooled)")


class ConditionalRead(BaseModel):
    """Two culprits: what `culprit` costs with `other` in (its revert at the head) and without
    it (reverting both against reverting `other` alone)."""

    culprit: int
    other: int
    with_other: EstimateRead
    without_other: EstimateRead


class CleanSetRead(EstimateRead):
    """Culprits that, reverted together, recover what reverting all of them does (`rel`, `ci`:
    their recovery at the bad end) while every measured smaller set (`short`) falls short."""

    variant: str = Field(description="the culprit indices reverted together, e.g. '0+1'")
    culprits: list[int]
    short: list[str] = Field(description="its measured proper subsets (variant keys), each short of the loss")


class CaseAttributionRead(BaseModel):
    case: str
    culprits: list[int] = Field(description="indices of the culprits that moved this case")
    unit: str | None
    higher_is_better: bool
    head: ArmRead = Field(description="the bad end as it is")
    recoveries: list[RecoveryRead] = Field(description="each measured variant against the bad end")
    together: str | None = Field(description="the variant of every culprit that reverts cleanly (two or more)")
    interaction: EstimateRead | None = Field(
        description="all together minus the sum of the singles (log scale): 0 when the costs add up")
    verdict: Literal["interact", "additive", "undetermined"] | None
    interaction_metric: EstimateRead | None = Field(
        default=None, description="the interaction computed on the metric itself (TFLOP/s, GB/s)")
    conditional: list[ConditionalRead] = []
    clean_sets: list[CleanSetRead] = Field(
        default=[], description="when they interact: the smallest sets whose revert recovers the loss, every other "
                                "measured set falling short (empty when not resolved)")
    words: str


class AttributedCulpritRead(BaseModel):
    index: int
    label: str = Field(description="#PR, or the sha (range) when no PR is known")
    first_sha: str
    last_sha: str
    subject: str
    reverts_cleanly: bool
    problem: str | None = Field(description="e.g. 'does not revert cleanly at the head: conflicts in a.py'")


class VariantRead(BaseModel):
    key: str
    culprits: list[int]
    problem: str | None
    trials: int


class AttributionRead(BaseModel):
    """What each culprit costs at the bad end, alone and together, and whether they interact."""

    job_id: int = Field(description="the attribution job")
    status: str
    culprits: list[AttributedCulpritRead] = []
    variants: list[VariantRead] = []
    cases: list[CaseAttributionRead] = []
    head_trials: int = 0


class FixCheckRead(BaseModel):
    """A compare whose base holds culprits named by an earlier bisect, on one case."""

    case: str
    culprits: list[str] = Field(description="the earlier culprits that moved this case (#PR or sha)")
    lost: float = Field(description="their step together (relative, negative for a loss)")
    recovered: float = Field(description="this pull request's step on the case")
    left: float = Field(description="what remains of the earlier step (relative)")
    share: float | None = Field(description="part of the loss recovered (log scale)")
    fixes: str | None = Field(description="with an attribution: the culprit whose revert recovers most like this PR")
    explained_by: list[str] = Field(description="the culprits that explain the remainder")
    predicted_left: EstimateRead | None = Field(description="what they cost once `fixes` is fixed, per the attribution")
    words: str
