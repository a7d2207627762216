"""Effect size of a step on one case: relative change of the medians with a bootstrap interval.
Pure; deterministic for a given seed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.bisect.model import CaseEffect


def bootstrap_effect(before: Sequence[float], after: Sequence[float], *, confidence: float = 0.95,
                     resamples: int = 2000, seed: int = 0) -> CaseEffect:
    """rel = median(after)/median(before) - 1 with a percentile bootstrap interval (each side
    resampled on its own). Raises ValueError when either side is empty."""
    a = np.asarray(before, dtype=float)
    b = np.asarray(after, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("both sides need at least one value")
    med_a, med_b = float(np.median(a)), float(np.median(b))
    rng = np.random.default_rng([seed, a.size, b.size])
    boot_a = np.median(a[rng.integers(0, a.size, (resamples, a.size))], axis=1)
    boot_b = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    rels = boot_b / boot_a - 1.0
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(rels, [tail, 100 - tail])
    return CaseEffect(rel=med_b / med_a - 1.0, ci=(float(low), float(high)), before=med_a, after=med_b)
