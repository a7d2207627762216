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
Intervals are Student's t on the per-trial noise pooled over every arm of the case (the arms run
side by side on one machine, so they share one noise level): var(d_S) = s^2 (1/n_S + 1/n_head),
var(I) = s^2 (1/n_all + sum 1/n_i + (k-1)^2 / n_head), with the pooled degrees of freedom.

When culprits interact, the *clean sets* say which reverts the fix needs: the smallest sets of
culprits whose revert recovers what reverting all of them does, every other measured set falling
short ("reverting {#930, #950} together recovers 9.7%; neither alone does").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
from scipy import stats

from perfbisect.service.bisect.model import Verdict
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


@dataclass(frozen=True)
class Estimate:
    """A log-scale effect `log` with its standard error; `rel` and `ci` are exp(.) - 1."""

    log: float
    se: float
    df: int
    rel: float
    ci: tuple[float, float]

    def excludes_zero(self) -> bool:
        return self.ci[0] > 0 or self.ci[1] < 0


def estimate(log: float, se: float, df: int, confidence: float = 0.95) -> Estimate:
    """exp(log +- t(df) * se) - 1. Raises ValueError when df < 1."""
    if df < 1:
        raise ValueError("an interval needs at least one degree of freedom")
    half = float(stats.t.ppf((1 + confidence) / 2, df)) * se
    return Estimate(log, se, df, math.expm1(log), (math.expm1(log - half), math.expm1(log + half)))


def _mean_log(values: Sequence[float]) -> float:
    return float(np.mean(np.log(np.asarray(values, dtype=float))))


def recovery(head: Sequence[float], variant: Sequence[float], noise: float, df: int,
             confidence: float = 0.95) -> Estimate:
    """What reverting the variant's culprits recovers at the head (the sign follows the values:
    for a higher-is-better value, > 0 is faster)."""
    se = noise * math.sqrt(1 / len(variant) + 1 / len(head))
    return estimate(_mean_log(variant) - _mean_log(head), se, df, confidence)


def interaction(head: Sequence[float], singles: Sequence[Sequence[float]], together: Sequence[float],
                noise: float, df: int, confidence: float = 0.95) -> Estimate:
    """All together minus the sum of the singles, on the log scale. Raises ValueError with
    fewer than two singles (one culprit cannot interact)."""
    if len(singles) < 2:
        raise ValueError("an interaction needs at least two culprits")
    k = len(singles)
    log = _mean_log(together) - sum(_mean_log(s) for s in singles) + (k - 1) * _mean_log(head)
    var = 1 / len(together) + sum(1 / len(s) for s in singles) + (k - 1) ** 2 / len(head)
    return estimate(log, noise * math.sqrt(var), df, confidence)


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


def clean_sets(values: Mapping[Variant, Sequence[float]], together: Variant, noise: float, df: int,
               min_effect: float, confidence: float = 0.95) -> list[CleanSet]:
    """The minimal sets of culprits that recover the loss: `values` holds per-trial values of the
    head (HEAD) and of the measured variants (subsets of `together`, the variant of every culprit
    that reverts cleanly, whose recovery is the loss). A set recovers when what reverting all
    recovers beyond it (the shortfall, mean log all - mean log set, oriented by the loss's sign,
    s^2 (1/n_all + 1/n_set)) stays under the minimum effect. Empty when the loss itself is not
    resolved, or when any measured set is neither clearly recovering nor clearly short: only
    resolved sets are named, so "the others don't" holds of every set measured."""
    head = values.get(HEAD)
    if not head or not values.get(together):
        return []
    loss = recovery(head, values[together], noise, df, confidence)
    if not loss.excludes_zero():
        return []
    sign = 1.0 if loss.log > 0 else -1.0
    threshold = math.log1p(min_effect)
    measured = sorted((v for v in values if v and set(v) <= set(together)), key=lambda v: (len(v), v))
    recovers = {together: True}
    for variant in measured:
        if variant != together:
            short = recovery(values[variant], values[together], noise, df, confidence)
            oriented = estimate(sign * short.log, short.se, df, confidence)
            recovers[variant] = _recovers_all(oriented, threshold)
    if None in recovers.values():
        return []
    minimal = [v for v in measured if recovers[v] and not any(recovers[u] and set(u) < set(v) for u in measured)]
    return [CleanSet(v, recovery(head, values[v], noise, df, confidence),
                     tuple(u for u in measured if set(u) < set(v))) for v in minimal]


@dataclass(frozen=True)
class CaseAttribution:
    """One case: the recovery of every measured variant, of each culprit alone and of all the
    culprits that revert cleanly together, and their interaction with its verdict:
    'interact' (the interval excludes 0 and |I| is at least the minimum effect), 'additive'
    (the interval lies within +- the minimum effect) or 'undetermined'."""

    case: str
    culprits: tuple[int, ...]
    recoveries: Mapping[Variant, Estimate]
    together: Variant | None
    interaction: Estimate | None
    verdict: str | None
    trials: Mapping[Variant, int] = field(default_factory=dict)
    clean: tuple[CleanSet, ...] = ()  # when they interact: see clean_sets


def _decide(estimate_: Estimate, min_effect: float) -> str:
    threshold = math.log1p(min_effect)
    if estimate_.excludes_zero() and abs(estimate_.log) >= threshold:
        return "interact"
    low, high = (math.log1p(c) for c in estimate_.ci)
    return "additive" if -threshold < low and high < threshold else "undetermined"


def attribute_case(case: str, culprits: Sequence[int], values: Mapping[Variant, Sequence[float]],
                   config: AttributionConfig = AttributionConfig()) -> CaseAttribution:
    """The attribution of one case from its arms' per-trial values (HEAD and variants; a
    variant that did not revert cleanly is simply absent). Needs two trials in some arm."""
    mine = set(culprits)
    present = {v: list(vals) for v, vals in values.items()
               if len(vals) and min(vals) > 0 and set(v) <= mine}
    trials = {v: len(vals) for v, vals in present.items()}
    head = present.get(HEAD)
    pooled = pooled_noise([np.asarray(v) for v in present.values()])
    if not head or pooled is None:
        return CaseAttribution(case, tuple(culprits), {}, None, None, None, trials)
    noise, df = pooled
    recoveries = {v: recovery(head, vals, noise, df, config.confidence) for v, vals in present.items() if v != HEAD}
    clean = tuple(c for c in sorted(culprits) if (c,) in present)
    together = clean if len(clean) >= 2 and clean in present else None
    if together is None:
        return CaseAttribution(case, tuple(culprits), recoveries, clean if clean in present else None, None, None,
                               trials)
    term = interaction(head, [present[(c,)] for c in clean], present[together], noise, df, config.confidence)
    verdict = _decide(term, config.min_effect)
    sets = clean_sets(present, together, noise, df, config.min_effect, config.confidence) if verdict == "interact" else []
    return CaseAttribution(case, tuple(culprits), recoveries, together, term, verdict, trials, tuple(sets))


@dataclass(frozen=True)
class AttributionPlan:
    requests: Mapping[Variant, int]  # more trials per arm this round
    done: bool


def plan_round(cases: Mapping[str, Sequence[int]], variants: Sequence[Variant],
               values: Mapping[Variant, Mapping[str, Sequence[float]]], attempts: Mapping[Variant, int],
               conflicts: set[Variant], config: AttributionConfig = AttributionConfig()) -> AttributionPlan:
    """The next round: every live arm (the head and each variant that reverted cleanly) is
    brought to the same trial count, `initial` first and `block` more while any variant's
    verdict against the head is UNKNOWN (the bisect's rule), an interaction is undetermined or
    the clean sets of an interaction are not resolved, up to `max_trials`. `attempts` counts finished trials per arm, failed ones included.
    `cases`: case -> the culprits whose attribution it reports."""
    live = [HEAD] + [v for v in variants if v not in conflicts]
    counts = {v: attempts.get(v, 0) for v in live}
    top = max(counts.values())
    if top < config.initial:
        return AttributionPlan({v: config.initial - n for v, n in counts.items() if n < config.initial}, False)
    at_cap = top >= config.max_trials
    if at_cap or not _undecided(cases, live, values, config):
        return AttributionPlan({}, True)
    target = min(config.max_trials, top + config.block)
    return AttributionPlan({v: target - n for v, n in counts.items() if n < target}, False)


def _undecided(cases: Mapping[str, Sequence[int]], live: Sequence[Variant],
               values: Mapping[Variant, Mapping[str, Sequence[float]]], config: AttributionConfig) -> bool:
    for case, culprits in cases.items():
        head = values.get(HEAD, {}).get(case, [])
        pooled = pooled_noise([np.asarray(values.get(v, {}).get(case, [])) for v in live])
        noise, noise_df = pooled if pooled else (None, None)
        for variant in live[1:]:
            if not set(variant) <= set(culprits):
                continue
            mine = values.get(variant, {}).get(case, [])
            if not head or not mine:
                return True
            # the bisect's rule: rank tests, or a gap of many pooled noise widths (sequential route)
            verdict = assess(head, mine, min_effect=config.min_effect, alpha=config.alpha, same_z=config.same_z,
                             noise=noise, noise_df=noise_df, sequential_alpha=config.sequential_alpha).verdict
            if verdict == Verdict.UNKNOWN:
                return True
        result = attribute_case(case, culprits, {v: values.get(v, {}).get(case, []) for v in live}, config)
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
