"""Attribution at the head: what reverting each culprit recovers, alone and together, and
whether the culprits interact. Pure: no database, git, Celery or CUDA.

An *arm* is the bad end as it is ("head") or a *variant*: the bad end with a set of culprits
reverted (a tuple of culprit indices, sorted). Every arm is measured in the same rounds, with
per-trial decision values per case, as a bisect measures revisions.

Effects live on the log scale, where a culprit that scales a kernel's time by a factor adds
log(factor) whatever else is there:
- the recovery of variant S is d_S = mean(log S) - mean(log head), shown as exp(d_S) - 1;
- the interaction of culprits 1..k is I = d_all - (d_1 + ... + d_k): all together minus the sum
  of the singles. Two culprits that each slow the kernel by their own factor give I = 0; I < 0
  when reverting either one recovers most of what reverting both does (one costs more when the
  other is present), I > 0 when a culprit only shows once the other is gone.
Every estimate is a contrast of the arms (weights summing to 0; `Contrasts`). Measured side by
side (issue 23: each variant in blocks `head v v head` with the bad end), a variant's recovery is
*paired*: the mean of its within-block differences against the bad end of its own blocks, with
the bisect's paired standard error (service/bisect/paired.py), so drift between blocks (a
co-tenant, a memory-bandwidth neighbour) neither shifts nor widens it; the interaction combines
these paired recoveries, var(I) = var(d_all) + sum var(d_i), as the variants' blocks share no
trial. A variant with no complete block (jobs from before blocks) falls back to the *pooled*
estimate: the arms' mean logs over all their trials, Student's t on the per-trial noise pooled
over every arm of the case, var(d_S) = s^2 (1/n_S + 1/n_head), var(I) = s^2 (1/n_all + sum 1/n_i
+ (k-1)^2 / n_head); each estimate says which it is (`Estimate.paired`).

When culprits interact, the *clean sets* say which reverts the fix needs: the smallest sets of
culprits whose revert recovers what reverting all of them does, every other measured set falling
short ("reverting {#930, #950} together recovers 9.7%; neither alone does").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
from scipy import stats

from perfbisect.service.bisect.model import SIDE_BY_SIDE, Observation, RevisionState, Verdict
from perfbisect.service.bisect.paired import PairedStep, block_residual, paired_comparison, paired_step
from perfbisect.service.bisect.verdict import assess, pooled_noise

Variant = tuple[int, ...]  # culprit indices reverted together, sorted
HEAD: Variant = ()


def variants_of(culprits: Sequence[int]) -> list[Variant]:
    """The variants to measure for one group of culprits: every non-empty subset for up to 3
    (2^k - 1), each alone and all together above that. Smallest first."""
    ordered = sorted(culprits)
    if len(ordered) <= 3:
        return [combo for size in range(1, len(ordered) + 1) for combo in combinations(ordered, size)]
    return [(c,) for c in ordered] + [tuple(ordered)]


def case_variants(case_culprits: Mapping[str, Sequence[int]]) -> list[Variant]:
    """The variants of an attribution: each case's own `variants_of` its culprits, once each.
    Per case, not per group of culprits that share a case: a culprit named on two cases (or a
    false one) would join their culprits into one group of more than 3, which measures no
    subsets, and the case whose culprits interact would get no interaction (bench/RESULTS.md,
    tenth session: #945 joined the gemm and RMSNorm culprits)."""
    variants: list[Variant] = []
    for culprits in case_culprits.values():
        variants += [v for v in variants_of(culprits) if v not in variants]
    return variants


def variant_key(variant: Variant) -> str:
    """How a trial names its variant ('0+2'); '' is the head."""
    return "+".join(str(i) for i in variant)


def parse_variant(key: str | None) -> Variant:
    return tuple(sorted(int(part) for part in key.split("+"))) if key else HEAD


def observed(values: Mapping[str, Sequence[float]],
             blocks: Mapping[str, Sequence[int | None]] | None = None) -> Observation:
    """An arm's per-case values and, parallel to them, the side-by-side block of each (None: not
    in a block; no `blocks`: none was)."""
    return Observation(RevisionState.ok, values={case: list(v) for case, v in values.items()},
                       blocks={case: list(b) for case, b in (blocks or {}).items()})


def _mean_log(values: Sequence[float]) -> float:
    return float(np.mean(np.log(np.asarray(values, dtype=float))))


@dataclass(frozen=True)
class Estimate:
    """A log-scale effect `log` with its standard error; `rel` and `ci` are exp(.) - 1. `paired`:
    on within-block differences (see Contrasts), else pooled over every trial of the arms."""

    log: float
    se: float
    df: int
    rel: float
    ci: tuple[float, float]
    paired: bool = False

    def excludes_zero(self) -> bool:
        return self.ci[0] > 0 or self.ci[1] < 0


def estimate(log: float, se: float, df: int, confidence: float = 0.95, paired: bool = False) -> Estimate:
    """exp(log +- t(df) * se) - 1. Raises ValueError when df < 1."""
    if df < 1:
        raise ValueError("an interval needs at least one degree of freedom")
    half = float(stats.t.ppf((1 + confidence) / 2, df)) * se
    return Estimate(log, se, df, math.expm1(log), (math.expm1(log - half), math.expm1(log + half)), paired)


@dataclass(frozen=True)
class Contrasts:
    """One case's estimates: combinations sum_v w_v mean log(v) of its arms (HEAD included) whose
    weights sum to 0: a recovery (the variant +1, the head -1), the interaction (all together +1,
    each single -1, the head k-1), a set's shortfall (all together +1, the set -1).

    Paired when every variant in it has a side-by-side block with the head (`steps`): then
    sum_v w_v d_v over the variants' paired steps against the bad end of their own blocks, with
    variance sum_v w_v^2 se_v^2 (different variants' blocks share no trial; the steps share the
    block model's residual, whose degrees of freedom the interval takes). Otherwise pooled over
    every trial: s^2 sum_v w_v^2 / n_v with the per-trial noise `pooled` over the arms."""

    means: Mapping[Variant, float]
    counts: Mapping[Variant, int]
    pooled: tuple[float, int]
    steps: Mapping[Variant, PairedStep]
    confidence: float = 0.95

    def paired(self, variants: Iterable[Variant]) -> bool:
        return all(v in self.steps for v in variants if v != HEAD)

    def of(self, weights: Mapping[Variant, float]) -> Estimate:
        """Raises ValueError when the weights do not sum to 0 (not a contrast)."""
        if abs(sum(weights.values())) > 1e-9:
            raise ValueError("a contrast's weights sum to 0")
        if self.paired(weights):
            terms = [(w, self.steps[v]) for v, w in weights.items() if v != HEAD and w]
            se = math.sqrt(sum((w * step.se) ** 2 for w, step in terms))
            df = min((step.df for _, step in terms), default=self.pooled[1])
            return estimate(sum(w * step.step for w, step in terms), se, df, self.confidence, paired=True)
        noise, df = self.pooled
        se = noise * math.sqrt(sum(w * w / self.counts[v] for v, w in weights.items()))
        return estimate(sum(w * self.means[v] for v, w in weights.items()), se, df, self.confidence)

    def recovery(self, variant: Variant) -> Estimate:
        """What reverting the variant's culprits recovers at the head (the sign follows the values:
        for a higher-is-better value, > 0 is faster)."""
        return self.of({variant: 1.0, HEAD: -1.0})

    def interaction(self, singles: Sequence[Variant], together: Variant) -> Estimate:
        """All together minus the sum of the singles. Raises ValueError with fewer than two
        singles (one culprit cannot interact)."""
        if len(singles) < 2:
            raise ValueError("an interaction needs at least two culprits")
        weights = {single: -1.0 for single in singles}
        return self.of({**weights, together: 1.0, HEAD: len(singles) - 1.0})


def case_contrasts(case: str, arms: Mapping[Variant, Observation], confidence: float = 0.95) -> Contrasts | None:
    """The contrasts of `case` over the arms with values (all positive) there; None without the
    head or without a degree of freedom for the pooled noise."""
    values = {v: o.values[case] for v, o in arms.items() if len(o.values.get(case, ())) and min(o.values[case]) > 0}
    pooled = pooled_noise(values.values())
    if HEAD not in values or pooled is None:
        return None
    residual = block_residual(arms, list(values), case)
    steps = {v: step for v in values if v != HEAD
             and (step := paired_step(arms[HEAD], arms[v], case, residual)) is not None}
    return Contrasts({v: _mean_log(x) for v, x in values.items()}, {v: len(x) for v, x in values.items()}, pooled,
                     steps, confidence)


@dataclass(frozen=True)
class AttributionConfig:
    """The bisect's stopping rules: `initial` trials per arm, then `block` more to every arm
    while a variant's verdict against the head (or the interaction) is undecided, up to
    `max_trials` per arm. `min_effect` is the bisect's minimum effect."""

    min_effect: float = 0.02
    initial: int = 3
    block: int = 2
    max_trials: int = 12
    confidence: float = 0.95
    alpha: float = 0.01
    sequential_alpha: float | None = 0.001
    same_z: float = 1.28


@dataclass(frozen=True)
class CleanSet:
    """Culprits whose revert together recovers what reverting all of them does (`recovery`, at the
    head), while each of its measured proper subsets (`short`) falls short of it."""

    culprits: Variant
    recovery: Estimate
    short: tuple[Variant, ...]


def _recovers_all(shortfall: Estimate, threshold: float) -> bool | None:
    """True: the set recovers the loss (the shortfall's interval lies under the minimum effect);
    False: it falls short (the interval excludes 0 and the shortfall is at least the minimum
    effect, the interaction's own rule); None: not resolved at this noise."""
    if math.log1p(shortfall.ci[1]) < threshold:
        return True
    if shortfall.excludes_zero() and shortfall.log >= threshold:
        return False
    return None


def clean_sets(contrasts: Contrasts, measured: Iterable[Variant], together: Variant,
               min_effect: float) -> list[CleanSet]:
    """The minimal sets of culprits that recover the loss: `measured` are the variants measured
    (subsets of `together`, the variant of every culprit that reverts cleanly, whose recovery is
    the loss). A set recovers when what reverting all recovers beyond it (the shortfall, all
    together minus the set, oriented by the loss's sign) stays under the minimum effect. Empty
    when the loss itself is not resolved, or when any measured set is neither clearly recovering
    nor clearly short: only resolved sets are named, so "the others don't" holds of every set
    measured."""
    loss = contrasts.recovery(together)
    if not loss.excludes_zero():
        return []
    sign = 1.0 if loss.log > 0 else -1.0
    threshold = math.log1p(min_effect)
    measured = sorted((v for v in measured if v and set(v) <= set(together)), key=lambda v: (len(v), v))
    recovers = {together: True}
    for variant in measured:
        if variant != together:
            short = contrasts.of({together: 1.0, variant: -1.0})
            oriented = estimate(sign * short.log, short.se, short.df, contrasts.confidence)
            recovers[variant] = _recovers_all(oriented, threshold)
    if None in recovers.values():
        return []
    minimal = [v for v in measured if recovers[v] and not any(recovers[u] and set(u) < set(v) for u in measured)]
    return [CleanSet(v, contrasts.recovery(v), tuple(u for u in measured if set(u) < set(v))) for v in minimal]


@dataclass(frozen=True)
class CaseAttribution:
    """One case: the recovery of every measured variant, of each culprit alone and of all the
    culprits that revert cleanly together, and their interaction with its verdict:
    'interact' (its p below the bisect's alpha and |I| at least the minimum effect), 'additive'
    (the 95% interval lies within +- the minimum effect) or 'undetermined'. `contrasts`: what the
    estimates were computed from (None when nothing could be)."""

    case: str
    culprits: tuple[int, ...]
    recoveries: Mapping[Variant, Estimate]
    together: Variant | None
    interaction: Estimate | None
    verdict: str | None
    trials: Mapping[Variant, int] = field(default_factory=dict)
    clean: tuple[CleanSet, ...] = ()  # when they interact: see clean_sets
    contrasts: Contrasts | None = None

    def blocks(self, variant: Variant) -> int:
        """The side-by-side blocks the variant's recovery was paired on (0: pooled)."""
        step = self.contrasts.steps.get(variant) if self.contrasts else None
        return len(step.blocks) if step else 0


def _decide(estimate_: Estimate, min_effect: float, alpha: float) -> str:
    """'interact' by the bisect's DIFFERENT rule (its t-test's p below `alpha`, the term at least
    the minimum effect), not by the 95% interval excluding 0: the planner looks again after every
    round, and at 95% an additive pair was called interacting in 3% of simulated attributions
    (1% at alpha 0.01, the planted pair still found in all; bench/RESULTS.md, eleventh session)."""
    threshold = math.log1p(min_effect)
    p = float(2 * stats.t.sf(abs(estimate_.log) / estimate_.se, estimate_.df)) if estimate_.se > 0 else (
        0.0 if estimate_.log else 1.0)
    if p < alpha and abs(estimate_.log) >= threshold:
        return "interact"
    low, high = (math.log1p(c) for c in estimate_.ci)
    return "additive" if -threshold < low and high < threshold else "undetermined"


def attribute_case(case: str, culprits: Sequence[int], arms: Mapping[Variant, Observation],
                   config: AttributionConfig = AttributionConfig()) -> CaseAttribution:
    """The attribution of one case from its arms (HEAD and variants: per-trial values, and the
    side-by-side block of each; a variant that did not revert cleanly is simply absent). Needs
    two trials in some arm."""
    mine = {v: o for v, o in arms.items() if set(v) <= set(culprits)}
    contrasts = case_contrasts(case, mine, config.confidence)
    trials = contrasts.counts if contrasts else {v: len(o.values.get(case, ())) for v, o in mine.items()
                                                 if o.values.get(case)}
    if contrasts is None:
        return CaseAttribution(case, tuple(culprits), {}, None, None, None, trials)
    present = contrasts.means
    recoveries = {v: contrasts.recovery(v) for v in present if v != HEAD}
    clean = tuple(c for c in sorted(culprits) if (c,) in present)
    together = clean if len(clean) >= 2 and clean in present else None
    if together is None:
        return CaseAttribution(case, tuple(culprits), recoveries, clean if clean in present else None, None, None,
                               trials, contrasts=contrasts)
    term = contrasts.interaction([(c,) for c in clean], together)
    verdict = _decide(term, config.min_effect, config.alpha)
    sets = clean_sets(contrasts, present, together, config.min_effect) if verdict == "interact" else []
    return CaseAttribution(case, tuple(culprits), recoveries, together, term, verdict, trials, tuple(sets), contrasts)


@dataclass(frozen=True)
class AttributionPlan:
    requests: Mapping[Variant, int]  # more trials per arm this round
    done: bool


def plan_round(cases: Mapping[str, Sequence[int]], variants: Sequence[Variant], arms: Mapping[Variant, Observation],
               attempts: Mapping[Variant, int], conflicts: set[Variant],
               config: AttributionConfig = AttributionConfig()) -> AttributionPlan:
    """The next round: every live arm (the head and each variant that reverted cleanly) is
    brought to the same trial count, `initial` first and `block` more while any variant's
    verdict against the head is UNKNOWN (the bisect's rule: on its side-by-side blocks once it
    has `SIDE_BY_SIDE` of them), an interaction is undetermined or the clean sets of an
    interaction are not resolved, up to `max_trials`. `attempts` counts finished trials per arm,
    failed ones included. `cases`: case -> the culprits whose attribution it reports. The count
    that the cap and the next target follow is the variants' (the head's while none is live):
    measured in blocks, the head runs two trials in every variant's block, so it has as many
    trials as all the variants together and would reach the cap after the first round."""
    live = [HEAD] + [v for v in variants if v not in conflicts]
    counts = {v: attempts.get(v, 0) for v in live}
    top = max(n for v, n in counts.items() if v != HEAD or len(live) == 1)
    if top < config.initial:
        return AttributionPlan({v: config.initial - n for v, n in counts.items() if n < config.initial}, False)
    at_cap = top >= config.max_trials
    if at_cap or not _undecided(cases, {v: arms[v] for v in live if v in arms}, live, config):
        return AttributionPlan({}, True)
    target = min(config.max_trials, top + config.block)
    return AttributionPlan({v: target - n for v, n in counts.items() if n < target}, False)


def _verdict(arms: Mapping[Variant, Observation], variant: Variant, case: str, config: AttributionConfig,
             residual: tuple[float, int] | None, pooled: tuple[float, int] | None) -> Verdict:
    """The variant against the head, as a bisect judges a pair: on its side-by-side blocks when
    it has enough, else rank tests or a gap of many pooled noise widths (sequential route)."""
    paired = paired_comparison(arms[HEAD], arms[variant], case, residual, min_effect=config.min_effect,
                               alpha=config.alpha, same_z=config.same_z, at_cap=False)
    if paired is not None and paired.blocks >= SIDE_BY_SIDE:
        return paired.comparison.verdict
    noise, noise_df = pooled if pooled else (None, None)
    return assess(arms[HEAD].values[case], arms[variant].values[case], min_effect=config.min_effect,
                  alpha=config.alpha, same_z=config.same_z, noise=noise, noise_df=noise_df,
                  sequential_alpha=config.sequential_alpha).verdict


def _undecided(cases: Mapping[str, Sequence[int]], arms: Mapping[Variant, Observation], live: Sequence[Variant],
               config: AttributionConfig) -> bool:
    for case, culprits in cases.items():
        measured = [v for v in live if v in arms and arms[v].values.get(case)]
        residual = block_residual(arms, measured, case)
        pooled = pooled_noise([arms[v].values[case] for v in measured])
        for variant in live[1:]:
            if not set(variant) <= set(culprits):
                continue
            if (HEAD not in measured or variant not in measured
                    or _verdict(arms, variant, case, config, residual, pooled) == Verdict.UNKNOWN):
                return True
        result = attribute_case(case, culprits, arms, config)
        if result.verdict == "undetermined" or (result.verdict == "interact" and not result.clean):
            return True  # the interaction, or which sets of culprits recover the loss, is not resolved
    return False


@dataclass(frozen=True)
class FixCheck:
    """A pull request against steps named earlier on one case, on the log scale: `lost` is the
    sum of the earlier culprits' steps (negative for a loss), `recovered` the PR's step, `left`
    what remains (lost + recovered), `share` the part of the loss recovered. With an attribution
    at the head, `fixes` is the culprit whose revert recovers most nearly what the PR does, and
    `predicted_left` what the others cost once it is fixed (all together minus its single):
    the culprit(s) that explain the remainder."""

    lost: float
    recovered: float
    left: float
    share: float | None
    fixes: int | None = None
    predicted_left: Estimate | None = None


def fix_check(earlier: Sequence[float], pr_step: float, together: Estimate | None = None,
              singles: Mapping[int, Estimate] | None = None) -> FixCheck:
    """`earlier`: the relative steps (rel) the culprits made on the case; `pr_step`: the PR's rel
    on it (head against base); `together`/`singles`: the attribution's recoveries at the bad end
    of all the culprits and of each alone (log scale), when one was measured."""
    lost = sum(math.log1p(step) for step in earlier)
    recovered = math.log1p(pr_step)
    share = recovered / -lost if lost else None
    if together is None or not singles:
        return FixCheck(lost, recovered, lost + recovered, share)
    fixes = min(singles, key=lambda i: abs(singles[i].log - recovered))
    rest = together.log - singles[fixes].log
    # the two recoveries are measured against the same head: their difference's se is at most the sum
    se = math.hypot(together.se, singles[fixes].se)
    return FixCheck(lost, recovered, lost + recovered, share, fixes, estimate(rest, se, together.df))
