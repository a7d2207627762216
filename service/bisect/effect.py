"""Effect size of a step on one case: relative change of the medians with a confidence interval.

The interval must hold across runs, so its unit is the trial (one fresh process), never the
samples inside one: the spread between trials (process-level modes, clocks, allocation) is what
a rerun of the job would see. `t_effect` models that spread with the per-trial noise pooled over
every measured revision and Student's t with its degrees of freedom, which keeps its coverage
with two trials a side, where a percentile bootstrap of two medians cannot (it under-covers
badly below about ten trials a side). `bootstrap_effect` is the fallback while no revision has
two trials. Pure; deterministic for a given seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from perfbisect.service.bisect.model import CaseEffect
from perfbisect.service.bisect.verdict import median_step_se


def _sides(before: Sequence[float], after: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("both sides need at least one value")
    return a, b


def t_effect(before: Sequence[float], after: Sequence[float], *, noise: float, df: int,
             confidence: float = 0.95) -> CaseEffect:
    """rel = median(after)/median(before) - 1 with the interval exp(log step +- t * se) - 1,
    se = noise * sqrt(f(na)/na + f(nb)/nb), `noise` the per-trial standard deviation of log
    values with `df` degrees of freedom, t Student's quantile. Raises ValueError when either
    side is empty or `df` < 1."""
    a, b = _sides(before, after)
    if df < 1:
        raise ValueError("the noise estimate needs at least one degree of freedom")
    med_a, med_b = float(np.median(a)), float(np.median(b))
    step = math.log(med_b / med_a)
    se = median_step_se(noise, a.size, b.size)
    half = float(stats.t.ppf((1 + confidence) / 2, df)) * se
    return CaseEffect(rel=math.expm1(step), ci=(math.expm1(step - half), math.expm1(step + half)),
                      before=med_a, after=med_b)


def bootstrap_effect(before: Sequence[float], after: Sequence[float], *, confidence: float = 0.95,
                     resamples: int = 2000, seed: int = 0) -> CaseEffect:
    """rel = median(after)/median(before) - 1 with a percentile bootstrap interval (each side's
    trials resampled on their own). Raises ValueError when either side is empty."""
    a, b = _sides(before, after)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    rng = np.random.default_rng([seed, a.size, b.size])
    boot_a = np.median(a[rng.integers(0, a.size, (resamples, a.size))], axis=1)
    boot_b = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    rels = boot_b / boot_a - 1.0
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(rels, [tail, 100 - tail])
    return CaseEffect(rel=med_b / med_a - 1.0, ci=(float(low), float(high)), before=med_a, after=med_b)
