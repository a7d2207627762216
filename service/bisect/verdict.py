"""Three-way verdicts for two revisions on one case (Chromium Pinpoint's rule, made effect aware).

- DIFFERENT: the relative step of the medians is at least the minimum effect AND either the
  significance test's p is below `alpha`, or (sequential route) the step is many noise widths
  wide: a t-test of the mean log values against the case's pooled per-trial noise, whose p is
  below `sequential_alpha`. The rank tests need 5 trials a side to reach p < 0.01; the t-test
  decides one trial against a neighbour's pooled level when the gap is overwhelming. Its noise
  is estimated from other revisions' trials, so its quantile is Student's t with the pooled
  degrees of freedom (few trials at the ends: a larger quantile, i.e. a wider gap needed).
- SAME: an equivalence bound: |step| + `same_z` standard errors is below the minimum effect.
  The standard error comes from the case's per-trial noise and both sample sizes, so this is
  Pinpoint's "sample-size-aware high threshold": with few trials or much noise SAME is out of
  reach and the pair stays UNKNOWN until more trials come.
- UNKNOWN otherwise: the caller adds trials. At the trial cap (`at_cap`), an UNKNOWN is
  resolved to SAME: without significant evidence no revision is blamed (conservative for
  precision; a step that stays ambiguous at the cap is missed rather than invented).

Steps are measured in log space (log(after/before)), so a 10% drop and the matching rise of a
time metric weigh the same whichever way the metric points. Pure functions; nothing touched.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
from scipy import stats

from perfbisect.service.bisect.model import Verdict

# Standard error of a median relative to that of a mean, for normal data: sqrt(pi/2).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def median_variance_factor(n: int) -> float:
    """Variance of a sample median over that of the mean, for normal data: 1 up to two values
    (the median is the mean), the large-sample pi/2 beyond (an upper bound for small n: 1.35 at
    three values), so standard errors err on the wide side."""
    return 1.0 if n <= 2 else MEDIAN_SE_FACTOR ** 2


def median_step_se(noise: float, n_a: int, n_b: int) -> float:
    """Standard error of the log step between two medians of `n_a` and `n_b` trials."""
    return noise * math.sqrt(median_variance_factor(n_a) / n_a + median_variance_factor(n_b) / n_b)


class SignificanceTest(Protocol):
    """Strategy: a two-sample p-value (small = the samples differ)."""

    def pvalue(self, a: Sequence[float], b: Sequence[float]) -> float: ...


@dataclass(frozen=True)
class RankTest:
    """Pinpoint's test: the smaller p of Mann-Whitney U and two-sample Kolmogorov-Smirnov
    (exact for small samples). Needs at least 5 vs 5 (or 3 vs 9, 4 vs 6) to reach p < 0.01."""

    def pvalue(self, a: Sequence[float], b: Sequence[float]) -> float:
        return _rank_pvalue(tuple(float(x) for x in a), tuple(float(x) for x in b))


@dataclass(frozen=True)
class WelchTest:
    """Welch's unequal-variance t-test (Otava's choice for change points)."""

    def pvalue(self, a: Sequence[float], b: Sequence[float]) -> float:
        if len(a) < 2 or len(b) < 2:
            return 1.0
        if np.ptp(np.concatenate([a, b])) == 0:
            return 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # constant sides: p is 0, as it should
            p = stats.ttest_ind(a, b, equal_var=False).pvalue
        return 1.0 if math.isnan(p) else float(p)


@lru_cache(maxsize=1 << 16)
def _rank_pvalue(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    if len(a) < 1 or len(b) < 1 or min(a + b) == max(a + b):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # KS falls back to asymptotic on ties
        mwu = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
        ks = stats.ks_2samp(a, b).pvalue
    return float(min(mwu, ks))


@dataclass(frozen=True)
class Comparison:
    """One verdict with its evidence: `rel` = median(b)/median(a) - 1, `pvalue`, the standard
    error `se` of the log step (None without a noise estimate) and the minimum effect used."""

    verdict: Verdict
    rel: float
    pvalue: float
    se: float | None
    min_effect: float
    seq_pvalue: float = 1.0  # the sequential t-test's p (1.0 without a noise estimate)
    trials: tuple[int, int] = (0, 0)  # values on side a and side b


def pooled_noise(groups: Iterable[Sequence[float]]) -> tuple[float, int] | None:
    """Pooled within-group standard deviation of log values, and its degrees of freedom.
    Each group is one revision's per-trial values. None when no group has two values."""
    total, df = 0.0, 0
    for group in groups:
        if len(group) >= 2:
            logs = np.log(np.asarray(group, dtype=float))
            total += float(((logs - logs.mean()) ** 2).sum())
            df += len(group) - 1
    if df == 0:
        return None
    return math.sqrt(total / df), df


def assess(a: Sequence[float], b: Sequence[float], *, min_effect: float, noise: float | None = None,
           alpha: float = 0.01, same_z: float = 1.28, at_cap: bool = False,
           test: SignificanceTest = RankTest(), noise_df: int | None = None,
           sequential_alpha: float | None = None) -> Comparison:
    """Compare revision a's per-trial values with revision b's on one case.

    `noise` is the standard deviation of one trial's log value (pooled over many revisions by
    the planner); without it the two samples' own pooled spread is used. With `noise_df` (the
    degrees of freedom of that estimate) and `sequential_alpha`, the sequential t route may
    also call the pair DIFFERENT. Raises ValueError on a non-positive value (decision values
    are ratios or rates)."""
    if len(a) == 0 or len(b) == 0:
        return Comparison(Verdict.UNKNOWN, 0.0, 1.0, None, min_effect)
    if min(min(a), min(b)) <= 0:
        raise ValueError("decision values must be positive")
    step = math.log(float(np.median(b))) - math.log(float(np.median(a)))
    threshold = math.log1p(min_effect)
    p = test.pvalue(a, b)
    seq_p = sequential_pvalue(a, b, noise, noise_df) if sequential_alpha is not None else 1.0
    if noise is None:
        own = pooled_noise([a, b])
        noise = own[0] if own else None
    se = None if noise is None else median_step_se(noise, len(a), len(b))
    rel = math.expm1(step)
    if (p < alpha or seq_p < (sequential_alpha or 0.0)) and abs(step) >= threshold:
        verdict = Verdict.DIFFERENT
    elif se is not None and abs(step) + same_z * se < threshold:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.SAME if at_cap else Verdict.UNKNOWN
    return Comparison(verdict, rel, p, se, min_effect, seq_p, (len(a), len(b)))


def sequential_pvalue(a: Sequence[float], b: Sequence[float], noise: float | None,
                      noise_df: int | None) -> float:
    """Two-sided p of the difference of mean log values, in units of the pooled per-trial noise
    `noise` (estimated with `noise_df` degrees of freedom): Student's t, not the normal, so a
    noise estimate from few trials asks for a wider gap. 1.0 without a usable estimate."""
    if noise is None or not noise_df or noise <= 0 or not len(a) or not len(b):
        return 1.0
    gap = float(np.mean(np.log(b)) - np.mean(np.log(a)))
    t = abs(gap) / (noise * math.sqrt(1 / len(a) + 1 / len(b)))
    return float(2 * stats.t.sf(t, noise_df))


def compare(a: Sequence[float], b: Sequence[float], *, min_effect: float = 0.02,
            noise: float | None = None, alpha: float = 0.01, same_z: float = 1.28,
            at_cap: bool = False, test: SignificanceTest = RankTest(), noise_df: int | None = None,
            sequential_alpha: float | None = None) -> Verdict:
    """The verdict alone of `assess` (same arguments, same errors)."""
    return assess(a, b, min_effect=min_effect, noise=noise, alpha=alpha, same_z=same_z,
                  at_cap=at_cap, test=test, noise_df=noise_df, sequential_alpha=sequential_alpha).verdict
