"""Bounded history payloads: a series of thousands of points cut to about `width` points (a chart's
pixel width) without losing what a reader looks for. Pure functions, no database.

Min/max bucketing with pinned points: the points are cut into contiguous buckets; each bucket keeps
its first and last point and the points holding its extremes of the line and of the band (the
lowest value_min and ratio_min, the highest value_max and ratio_max, the lowest and highest value
and ratio), so every spike and the band's envelope survive; the points at a step's edges (and the
measured point just before each), and at a failed build or a wrong result, are kept whatever the
bucket. Largest-triangle (LTTB) keeps one point per bucket and would drop a band extreme.

The work is on columns (numpy arrays, dashboards.columns): a bucket's extreme is found by a
segmented reduction over all buckets at once, not by a Python loop per bucket.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from perfbisect.dashboards.history import RevisionPoint

# (field, keep the lowest?) per extreme kept in each bucket; a missing field falls back to the value.
EXTREMES = (("value", True), ("value", False), ("ratio", True), ("ratio", False),
            ("value_min", True), ("value_max", False), ("ratio_min", True), ("ratio_max", False))
FALLBACK = {"value_min": "value", "value_max": "value", "ratio_min": "ratio", "ratio_max": "ratio"}


def pinned_offsets(indexes: np.ndarray, marks: Collection[int]) -> np.ndarray:
    """Offsets into the ascending commit `indexes` that must survive: the points at the commit
    indexes `marks` (step edges, failed builds, wrong results) and, for each mark, the measured
    point just before it (a step is drawn from there)."""
    wanted = np.fromiter(marks, dtype=np.int64, count=len(marks))
    at = np.searchsorted(indexes, wanted)
    inside = at < len(indexes)
    exact = at[inside][indexes[at[inside]] == wanted[inside]]
    before = at[at > 0] - 1
    return np.unique(np.concatenate([exact, before]))


def _extreme_columns(floats: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Per extreme, the column to search, negated for a highest (so every search is a lowest):
    a missing band edge read as the line, a missing value as +inf (never picked)."""
    columns = []
    for name, lowest in EXTREMES:
        column = floats[name]
        if name in FALLBACK:
            column = np.where(np.isnan(column), floats[FALLBACK[name]], column)
        column = np.where(np.isnan(column), np.inf if lowest else -np.inf, column)
        columns.append(column if lowest else -column)
    return columns


def _bucketed(columns: list[np.ndarray], n: int, buckets: int) -> np.ndarray:
    starts = np.arange(buckets, dtype=np.int64) * n // buckets
    starts = np.unique(starts)
    sizes = np.diff(np.append(starts, n))
    bucket_of = np.repeat(np.arange(len(starts)), sizes)
    keep = [starts, starts + sizes - 1]
    for column in columns:
        lowest = np.minimum.reduceat(column, starts)
        hits = np.flatnonzero(column == lowest[bucket_of])
        _, first = np.unique(bucket_of[hits], return_index=True)  # the first point holding it
        keep.append(hits[first])
    return np.unique(np.concatenate(keep))


def keep_offsets(indexes: np.ndarray, floats: Mapping[str, np.ndarray], width: int,
                 marks: Collection[int] = ()) -> np.ndarray:
    """Ascending offsets of at most `width` of the points (commit `indexes`, ascending, and their
    `floats` columns: value, ratio and the band's edges, NaN where missing) when the pinned ones
    fit in it (they are always all kept): each bucket's extremes and the marked commits (see the
    module's docstring). A series of `width` points or fewer is kept whole."""
    n = len(indexes)
    if n <= width:
        return np.arange(n)
    pinned = pinned_offsets(indexes, marks)
    # Up to len(EXTREMES) + 2 points per bucket, often fewer (one point holds several extremes):
    # start from the number that fills `width` in the common case and shrink until it fits.
    buckets = max(1, (width - len(pinned)) // 4)
    columns = _extreme_columns(floats)
    while True:
        keep = np.union1d(_bucketed(columns, n, buckets), pinned)
        if len(keep) <= width or buckets == 1:
            return keep
        buckets = max(1, buckets * (width - len(pinned)) // max(1, len(keep) - len(pinned)) - 1)


def point_floats(points: Sequence[RevisionPoint]) -> dict[str, np.ndarray]:
    """The float columns of RevisionPoints, NaN where None."""
    return {name: np.array([getattr(p, name) for p in points], dtype=np.float64)
            for name in {n for n, _ in EXTREMES}}


def downsample(points: Sequence[RevisionPoint], width: int, marks: Collection[int] = ()) -> list[RevisionPoint]:
    """At most `width` of `points` (in order) when the pinned ones fit in it, as keep_offsets
    chooses them. A series of `width` points or fewer is returned whole."""
    if len(points) <= width:
        return list(points)
    indexes = np.array([p.index for p in points], dtype=np.int64)
    return [points[i] for i in keep_offsets(indexes, point_floats(points), width, marks)]
