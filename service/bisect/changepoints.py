"""Change points over a case's branch history: E-Divisive, with a significance test and a
minimum magnitude instead of permutations, as Apache Otava does.

Binary segmentation: in a segment, the split that maximises the energy statistic (Matteson &
James's E-Divisive with alpha = 1) is a candidate; it is kept when the two sides differ
significantly (Welch's t-test by default; the test is a strategy object), and both sides are
searched again. A last pass re-tests every kept point against its neighbouring points only and
drops, one at a time, those that are no longer significant or whose relative change of the means
is below `min_magnitude` (the least significant first, then the smallest). Pure. The distance
matrix is held whole (n x n floats), which suits histories of up to a few thousand points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.bisect.verdict import SignificanceTest, WelchTest


@dataclass(frozen=True)
class ChangePoint:
    """The series changes level at `index` (the first point of the new level)."""

    index: int
    mean_before: float
    mean_after: float
    pvalue: float

    @property
    def rel(self) -> float:
        """Relative change of the means: after/before - 1."""
        return self.mean_after / self.mean_before - 1.0


def _block_sums(x: np.ndarray) -> np.ndarray:
    """2-D prefix sums of the distance matrix |x_i - x_j|, so any block sum is O(1)."""
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((x.size + 1, x.size + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    return p


def _block(p: np.ndarray, r0: int, r1: int, c0: int, c1: int) -> float:
    return float(p[r1, c1] - p[r0, c1] - p[r1, c0] + p[r0, c0])


def _best_split(p: np.ndarray, lo: int, hi: int, min_size: int) -> int | None:
    """The split of x[lo:hi] with the largest E-Divisive statistic, or None if it is too short."""
    best, best_q = None, -np.inf
    for tau in range(lo + min_size, hi - min_size + 1):
        m, n = tau - lo, hi - tau
        between = 2.0 * _block(p, lo, tau, tau, hi) / (m * n)
        within_l = _block(p, lo, tau, lo, tau) / (m * (m - 1)) if m > 1 else 0.0
        within_r = _block(p, tau, hi, tau, hi) / (n * (n - 1)) if n > 1 else 0.0
        q = m * n / (m + n) * (between - within_l - within_r)
        if q > best_q:
            best, best_q = tau, q
    return best


def _candidate(x: np.ndarray, lo: int, tau: int, hi: int, test: SignificanceTest) -> ChangePoint:
    left, right = x[lo:tau], x[tau:hi]
    return ChangePoint(tau, float(left.mean()), float(right.mean()), test.pvalue(left, right))


def _strong(point: ChangePoint, pvalue: float, min_magnitude: float) -> bool:
    return point.pvalue < pvalue and abs(point.rel) >= min_magnitude


def compute_change_points(series: Sequence[float], *, min_magnitude: float = 0.0, pvalue: float = 0.001,
                          min_size: int = 3, test: SignificanceTest = WelchTest()) -> list[ChangePoint]:
    """Change points of `series` (oldest first), sorted by index. `min_size` is the fewest points
    a level must have. Raises ValueError on a non-positive mean where a magnitude is needed
    (relative change is undefined), or on `min_size` < 2. Touches nothing."""
    if min_size < 2:
        raise ValueError("min_size must be at least 2")
    x = np.asarray(series, dtype=float)
    if x.size < 2 * min_size:
        return []
    p = _block_sums(x)
    found: list[int] = []
    segments = [(0, x.size)]
    while segments:
        lo, hi = segments.pop()
        tau = _best_split(p, lo, hi, min_size)
        if tau is None or not _strong(_candidate(x, lo, tau, hi, test), pvalue, 0.0):
            continue
        found.append(tau)
        segments += [(lo, tau), (tau, hi)]
    if found and np.any(x <= 0):
        raise ValueError("relative magnitudes need a positive series")
    while True:  # re-test each point between its neighbours; drop the weakest failure, repeat
        bounds = [0, *sorted(found), x.size]
        points = [_candidate(x, bounds[i - 1], bounds[i], bounds[i + 1], test) for i in range(1, len(bounds) - 1)]
        weak = [pt for pt in points if not _strong(pt, pvalue, min_magnitude)]
        if not weak:
            return points
        found.remove(max(weak, key=lambda pt: (pt.pvalue >= pvalue, pt.pvalue if pt.pvalue >= pvalue else -abs(pt.rel))).index)
