"""Change points over a case's branch history: steps of the level, not trends or noise.

Apache Otava's recipe (E-Divisive split search, a significance test instead of permutations, a
minimum magnitude, re-testing each point against its neighbours only), made robust for the
histories perfbisect sees, which drift, curve, alternate between two modes and carry outliers:

1. Candidates by wild binary segmentation over seeded intervals (Kovacs et al. 2020): in a
   segment, the best split of the interval with the largest E-Divisive statistic for alpha = 2
   (for alpha = 2 the energy distance is twice the squared difference of the means, so the
   statistic is the mean-shift CUSUM, O(n) per interval). Short intervals find a short
   excursion (a drop fixed a few commits later) that the best split of the whole averages away.
   Each point is then moved to the best split between its neighbours, within `min_size`.
2. A point stands only if three tests pass (`_assess`):
   - level: Student's t-test of the two sides (pooled deviation, never below the robust noise),
     Bonferroni-corrected for the split positions between the neighbours (the split is the
     best of many, so its raw p-value is optimistic);
   - jump: a line fitted to each side (up to `window` points) must leave a significant gap
     where the two lines meet, its standard error inflated for autocorrelated residuals. A
     trend, however steep, a smooth curve and a bend of slope leave none, so a split that one
     trend explains is rejected. Where the slopes do not pay for themselves (BIC) and two
     levels fit better than one line, the sides are fitted as levels (far more power for a
     small step between long flat levels);
   - size: the step is at least `min_sigmas` robust noise units (MAD of first differences,
     which a step or a slow trend barely moves) and at least `min_magnitude` of the level.
3. Re-test: every kept point against its neighbouring points only; the weakest failure is
   dropped and its neighbours re-tested, until all stand (Otava's "weak change points" pass).
4. `relative` (timings, throughput, ratios to a control): the noise is a share of the level, so
   the series is tested on its logs. On the values themselves one noise figure serves every
   level, and the noise of a high, noisy level hid a step between two low, quiet ones: a tracked
   ratio that fell 0.47 -> 0.14 -> 0.08 -> 0.24 lost its -40% step (bench/RESULTS.md, twelfth
   session). The means are then geometric and `min_magnitude` bounds the ratio of the levels.
5. A young level at the end (fewer than `min_size` points, each off the level before it by a
   step the size test would keep) is set aside: it cannot be tested yet, and left in the last
   segment it bends that segment's fitted line and level, so the step before it failed its
   re-test and vanished until the new level had `min_size` points (`_young_tail`).

Pure: numpy and scipy only; nothing is read or written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

# The fewest points on one side of a split that the jump test fits a line to (fewer: a level).
LINE_MIN = 5
LEVEL_SPREAD = 1 / 3  # of the jump: the most a short level's point may stray
# Normal consistency of the MAD, and sqrt(2) because a first difference holds two noises.
_MAD_TO_SIGMA = 1.4826 / math.sqrt(2.0)


@dataclass(frozen=True)
class ChangePoint:
    """The series changes level at `index` (the first point of the new level). `pvalue` is the
    larger of the level test's (corrected for the split positions searched) and the jump test's."""

    index: int
    mean_before: float
    mean_after: float
    pvalue: float

    @property
    def rel(self) -> float:
        """Relative change of the means: after/before - 1 (sign of the step over |before| when
        the level before is not positive; nan when it is 0)."""
        if self.mean_before == 0:
            return math.nan
        return (self.mean_after - self.mean_before) / abs(self.mean_before)


@dataclass(frozen=True)
class _Settings:
    pvalue: float
    trend_pvalue: float
    min_magnitude: float
    min_size: int
    min_sigmas: float
    window: int
    noise: float
    relative: bool = False


def _relative_step(before: float, after: float, cfg: _Settings) -> float:
    """|after / before - 1| of two levels (of the logs when `cfg.relative`); inf when before is 0."""
    if cfg.relative:
        return abs(math.expm1(after - before))
    return abs(after - before) / abs(before) if before != 0 else math.inf


def robust_noise(series: Sequence[float] | np.ndarray) -> float:
    """The noise of one point, from the MAD of first differences: a step is one outlying
    difference and a slow trend shifts all of them alike, so neither inflates it. Falls back to
    the mean absolute difference when over half the differences are equal (integer counts)."""
    x = np.asarray(series, dtype=float)
    if x.size < 3:
        return 0.0
    d = np.diff(x)
    mad = float(np.median(np.abs(d - np.median(d))))
    if mad == 0.0:
        mad = float(np.mean(np.abs(d - np.median(d)))) / 1.2533  # mean |dev| = 1.2533 MAD-sigma
    return mad * _MAD_TO_SIGMA


def _best_split(x: np.ndarray, lo: int, hi: int, min_size: int) -> tuple[float, int] | None:
    """The split of x[lo:hi] with the largest mean-shift CUSUM (E-Divisive, alpha = 2) and that
    statistic, or None if the segment is too short for two levels."""
    taus = np.arange(lo + min_size, hi - min_size + 1)
    if taus.size == 0:
        return None
    seg = x[lo:hi]
    csum = np.concatenate([[0.0], np.cumsum(seg - seg.mean())])
    m = (taus - lo).astype(float)
    n = hi - lo - m
    left = csum[taus - lo]  # sum of centred values before the split; those after sum to -left
    stat = np.abs(left / m + left / n) * np.sqrt(m * n / (m + n))
    best = int(np.argmax(stat))
    return float(stat[best]), int(taus[best])


def _seeded_intervals(n: int, min_size: int) -> list[tuple[int, int]]:
    """Seeded intervals (Kovacs et al. 2020): at each length n, n/sqrt2, n/2, ... down to
    2 * min_size, overlapping intervals shifted by half their length. Searching them, not only
    the whole segment, finds a short excursion (a drop and its recovery) that the best single
    split of the whole segment averages away."""
    out, length = {(0, n)}, float(n)
    while length >= 2 * min_size:
        width = int(length)
        count = 2 * math.ceil(n / length) - 1
        shift = (n - width) / max(count - 1, 1)
        out.update((round(i * shift), round(i * shift) + width) for i in range(count))
        length /= math.sqrt(2.0)
    return sorted(out)


def _level_pvalue(a: np.ndarray, b: np.ndarray, noise: float) -> float:
    """Two-sided p-value of a level change between the sides: Student's t with the pooled
    within-side deviation, never below the robust noise (two short, quiet sides would otherwise
    make any wobble significant). Pooled rather than Welch: a short new level (a few points) keeps
    its degrees of freedom."""
    m, n = a.size, b.size
    pooled = math.sqrt((float(np.sum((a - a.mean()) ** 2)) + float(np.sum((b - b.mean()) ** 2))) / (m + n - 2))
    scale = max(pooled, noise) * math.sqrt(1.0 / m + 1.0 / n)
    step = abs(float(b.mean() - a.mean()))
    if scale == 0.0:
        return 0.0 if step > 0 else 1.0
    return float(2.0 * stats.t.sf(step / scale, m + n - 2))


def _ar1_inflation(*sides: np.ndarray) -> float:
    """Variance inflation (1 + rho) / (1 - rho) for residuals with lag-1 autocorrelation rho
    (clipped to [0, 0.95]): residuals that wander smoothly (a curve the lines do not follow, a
    random walk) hold fewer independent points than they count, and a test that took them for
    independent would find a jump in any smooth series with little noise."""
    num = sum(float(r[1:] @ r[:-1]) for r in sides if r.size > 1)
    den = sum(float(r @ r) for r in sides)
    rho = min(max(num / den, 0.0), 0.95) if den > 0 else 0.0
    return (1.0 + rho) / (1.0 - rho)


def _fit(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares coefficients and residuals."""
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return coef, y - design @ coef


def _jump_pvalue(x: np.ndarray, lo: int, tau: int, hi: int, window: int) -> float:
    """Two-sided p-value of a jump at `tau`: a line is fitted to up to `window` points on each
    side and the jump is the gap between the two lines where they meet (between tau - 1 and
    tau), over its standard error. A smooth curve has no gap (the two fitted lines are biased
    alike at the boundary, to second order), nor has a bend of slope; a step has one. Where the
    slopes do not pay for themselves (BIC), the sides are fitted as levels instead: two
    extrapolated line ends are a far noisier gap than two means, and a small step between two
    long flat levels (1.5 noise units, TCPD's quality_control_2) was refused for want of power."""
    a, b = max(lo, tau - window), min(hi, tau + window)
    y = x[a:b]
    t = np.arange(a, b, dtype=float) - (tau - 0.5)
    right = (t > 0).astype(float)
    # The side before the split gets a slope only with LINE_MIN points: a line through three or
    # four noisy points tells no trend from noise, and its extrapolated end hides any step (a
    # tracked branch's first heads, then a drop). The side after always gets one: at the newest
    # heads a short last side may still hold a point of the old level, and only its slope
    # refuses that split.
    columns = [1 - right, right, t * right]
    level_before = tau - a < LINE_MIN
    if not level_before:
        columns.append(t * (1 - right))
    design = np.column_stack(columns)
    if y.size - design.shape[1] < 1:
        return 1.0
    coef, residuals = _fit(design, y)
    level_coef, level_residuals = _fit(design[:, :2], y)
    rss, level_rss = float(residuals @ residuals), float(level_residuals @ level_residuals)
    _, line_residuals = _fit(np.column_stack([np.ones_like(t), t]), y)
    # Levels must pay for dropping the slopes (BIC) and fit better than one line without a jump:
    # a drift cut in two fits two levels about as well as one line, and as levels it is a step.
    if (rss > 0 and level_rss < float(line_residuals @ line_residuals)
            and y.size * math.log(level_rss / rss) <= (design.shape[1] - 2) * math.log(y.size)):
        design, coef, residuals = design[:, :2], level_coef, level_residuals
    dof = y.size - design.shape[1]
    jump = coef[1] - coef[0]
    if level_before and np.max(np.abs(residuals[: tau - a])) > abs(jump) * LEVEL_SPREAD:
        # A short side fitted as a level must look like one: at the start of a history a split
        # forced one head late holds a point of the new level, off the side's mean by at least
        # half the jump; noise that large would hide the step anyway.
        return 1.0
    cov = np.linalg.pinv(design.T @ design)
    inflation = _ar1_inflation(residuals[: tau - a], residuals[tau - a:])
    se = math.sqrt(float(residuals @ residuals) / dof * inflation * (cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]))
    if se == 0.0:
        return 0.0 if jump != 0 else 1.0
    return float(2 * stats.t.sf(abs(jump) / se, dof))


def _searched(lo: int, hi: int, min_size: int) -> int:
    """How many split positions a segment offers: the Bonferroni factor of its best split."""
    return max(1, hi - lo - 2 * min_size + 1)


def _level_passes(x: np.ndarray, lo: int, tau: int, hi: int, cfg: _Settings) -> bool:
    """Size and level tests only: is the split worth keeping as a candidate?"""
    left, right = x[lo:tau], x[tau:hi]
    before, step = float(left.mean()), abs(float(right.mean() - left.mean()))
    if step == 0.0 or step < cfg.min_sigmas * cfg.noise:
        return False
    if cfg.min_magnitude > 0 and (before == 0 and not cfg.relative
                                  or _relative_step(before, float(right.mean()), cfg) < cfg.min_magnitude):
        return False
    return _level_pvalue(left, right, cfg.noise) * _searched(lo, hi, cfg.min_size) < cfg.pvalue


def _assess(x: np.ndarray, lo: int, tau: int, hi: int, cfg: _Settings) -> tuple[ChangePoint, float | None]:
    """The change point at `tau` between its neighbours `lo` and `hi`, and None if it stands or
    else how weak it is (larger = weaker: a failed test ranks above a too small step)."""
    left, right = x[lo:tau], x[tau:hi]
    p_level = min(1.0, _level_pvalue(left, right, cfg.noise) * _searched(lo, hi, cfg.min_size))
    p_jump = _jump_pvalue(x, lo, tau, hi, cfg.window)
    point = ChangePoint(tau, float(left.mean()), float(right.mean()), max(p_level, p_jump))
    if p_level >= cfg.pvalue or p_jump >= cfg.trend_pvalue:
        return point, 1.0 + max(p_level / cfg.pvalue, p_jump / cfg.trend_pvalue)
    if not _level_passes(x, lo, tau, hi, cfg):
        return point, 1.0 / (1.0 + abs(point.mean_after - point.mean_before) / max(cfg.noise, 1e-300))
    return point, None


def _segment_candidates(x: np.ndarray, cfg: _Settings) -> list[int]:
    """Wild binary segmentation over seeded intervals, on the level test alone: in a segment,
    the candidate is the best split of the interval inside it with the largest CUSUM among those
    that pass (a long interval over two steps may fail where a short one over one passes); a
    staircase looks like a trend until it is cut at its steps, so the trend test waits for the
    re-test between neighbours."""
    splits = []
    for a, b in _seeded_intervals(x.size, cfg.min_size):
        best = _best_split(x, a, b, cfg.min_size)
        if best is not None:
            splits.append((best[0], a, best[1], b))
    splits.sort(reverse=True)
    found: list[int] = []
    segments = [(0, x.size)]
    while segments:
        lo, hi = segments.pop()
        whole = _best_split(x, lo, hi, cfg.min_size)
        inside = [(stat, a, tau, b) for stat, a, tau, b in splits if lo <= a and b <= hi]
        if whole is not None:
            inside.append((whole[0], lo, whole[1], hi))
        inside.sort(reverse=True)
        tau = next((tau for _, a, tau, b in inside if _level_passes(x, a, tau, b, cfg)), None)
        if tau is None:
            continue
        found.append(tau)
        segments += [(lo, tau), (tau, hi)]
    return _refine(x, sorted(found), cfg.min_size)


def _refine(x: np.ndarray, found: list[int], min_size: int) -> list[int]:
    """Move each point to the best split between its neighbours, within `min_size` of where it
    was: an interval's split is placed by that interval's points alone and may sit a point off."""
    points = list(found)
    for i, tau in enumerate(points):
        lo = points[i - 1] if i else 0
        hi = points[i + 1] if i + 1 < len(points) else x.size
        near_lo, near_hi = max(lo, tau - 2 * min_size), min(hi, tau + 2 * min_size)
        best = _best_split(x, near_lo, near_hi, min_size)
        if best is not None:
            points[i] = best[1]
    return points


def _retest(x: np.ndarray, found: list[int], cfg: _Settings) -> list[ChangePoint]:
    """Re-test each point between its neighbours; drop the weakest failure, repeat. Dropping a
    point changes only its two neighbours' tests, so results are cached by (lo, tau, hi)."""
    cache: dict[tuple[int, int, int], tuple[ChangePoint, float | None]] = {}
    points = list(found)
    while True:
        bounds = [0, *points, x.size]
        results = []
        for i in range(1, len(bounds) - 1):
            key = (bounds[i - 1], bounds[i], bounds[i + 1])
            if key not in cache:
                cache[key] = _assess(x, *key, cfg)
            results.append(cache[key])
        weak = [(weakness, point.index) for point, weakness in results if weakness is not None]
        if not weak:
            return [point for point, _ in results]
        points.remove(max(weak)[1])


def _young_tail(x: np.ndarray, cfg: _Settings) -> int:
    """How many of the last points (fewer than `min_size`) form a level too young to test: the
    `min_size` points before them look like one level (none off their mean by more than
    LEVEL_SPREAD of the step: they hold no point of the new level), and each of the last points
    is beyond their range, on one side, off their mean by at least `min_sigmas` noise units and
    `min_magnitude` of that mean. 0 when none do."""
    for k in range(cfg.min_size - 1, 0, -1):
        if x.size - k < 2 * cfg.min_size:
            continue
        tail, before = x[-k:], x[-k - cfg.min_size:-k]
        level = float(before.mean())
        step = float(np.min(np.abs(tail - level)))
        one_side = bool(np.all(tail > before.max()) or np.all(tail < before.min()))
        steady = float(np.max(np.abs(before - level))) <= step * LEVEL_SPREAD
        big = step >= cfg.min_sigmas * cfg.noise and (
            cfg.min_magnitude == 0 or min(_relative_step(level, float(v), cfg) for v in tail) >= cfg.min_magnitude)
        if one_side and steady and big:
            return k
    return 0


def compute_change_points(series: Sequence[float], *, min_magnitude: float = 0.0, pvalue: float = 0.001,
                          trend_pvalue: float = 0.002, min_size: int = 4, min_sigmas: float = 1.5,
                          window: int = 35, relative: bool = False) -> list[ChangePoint]:
    """Change points of `series` (oldest first), sorted by index.

    `pvalue`: the largest p-value of the level test, Bonferroni-corrected for the split positions
    between the neighbours; `trend_pvalue`: the largest p-value of the jump test (the gap
    between lines fitted to either side, which rejects trends and curves); `min_magnitude`:
    the smallest |after - before| / |before| kept (0 keeps any size); `min_size`: the fewest
    points a level must have; `min_sigmas`: the smallest step in robust noise units; `window`:
    points on either side of a split in the jump test; `relative`: the noise is a share of the
    level, so the logs are tested (every value must be positive) and the means reported are
    geometric. The defaults were chosen on TCPD and on perf-like histories
    (bench/changepoint_accuracy.py, whose --loso scores them leaving each TCPD series out);
    tracked branches pass their own thresholds (service/alerts). Raises ValueError on
    `min_size` < 2, `window` < 2, or a series that is not one-dimensional and finite (positive
    when relative). Pure."""
    if min_size < 2:
        raise ValueError("min_size must be at least 2")
    if window < 2:
        raise ValueError("window must be at least 2")
    x = np.asarray(series, dtype=float)
    if x.ndim != 1:
        raise ValueError("a series is one-dimensional")
    if not np.all(np.isfinite(x)):
        raise ValueError("a series must hold finite numbers only")
    if relative:
        if not np.all(x > 0):
            raise ValueError("a relative series must hold positive numbers only")
        x = np.log(x)
    if x.size < 2 * min_size:
        return []
    cfg = _Settings(pvalue, trend_pvalue, min_magnitude, min_size, min_sigmas, max(window, min_size), robust_noise(x),
                    relative)
    x = x[: x.size - _young_tail(x, cfg)]
    points = _retest(x, _segment_candidates(x, cfg), cfg)
    if relative:
        points = [ChangePoint(p.index, math.exp(p.mean_before), math.exp(p.mean_after), p.pvalue) for p in points]
    return points


def vote_change_points(series: Sequence[float], *, windows: Sequence[int] = (30, 35, 40),
                       min_sizes: Sequence[int] = (4, 5), quorum: float = 0.5, tolerance: int = 2,
                       **options) -> list[ChangePoint]:
    """Change points that at least `quorum` of an ensemble of detectors agree on: one
    `compute_change_points` per (window, min_size), a point kept where members' points within
    `tolerance` of each other (chained) number at least `quorum` of the members; the member point
    at the cluster's median index stands for it. One setting's result moves with a small change
    of its settings through the re-test cascade; the majority of its neighbours moves less (TCPD,
    bench/changepoint_accuracy.py: mean F1 0.814 in-sample, 0.800 with the members chosen leaving
    each series out at a majority quorum, 0.771 with the quorum chosen too; one detector 0.811
    and 0.780). Six members cost six detectors' time. `options` go to every member. Pure."""
    members = [compute_change_points(series, window=w, min_size=m, **options) for w in windows for m in min_sizes]
    if not members:
        raise ValueError("an ensemble needs at least one window and one min_size")
    points = sorted((p for member in members for p in member), key=lambda p: p.index)
    clusters: list[list[ChangePoint]] = []
    for point in points:
        if clusters and point.index - clusters[-1][-1].index <= tolerance:
            clusters[-1].append(point)
        else:
            clusters.append([point])
    return [cluster[(len(cluster) - 1) // 2] for cluster in clusters if len(cluster) >= quorum * len(members)]
