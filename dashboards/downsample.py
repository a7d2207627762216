"""Bounded history payloads: a series of thousands of points cut to about `width` points (a chart's
pixel width) without losing what a reader looks for. Pure functions, no database.

Min/max bucketing with pinned points: the points are cut into contiguous buckets; each bucket keeps
its first and last point and the points holding its extremes of the line and of the band (the
lowest value_min and ratio_min, the highest value_max and ratio_max, the lowest and highest value
and ratio), so every spike and the band's envelope survive; the points at a step's edges (and the
measured point just before each), and at a failed build or a wrong result, are kept whatever the
bucket. Largest-triangle (LTTB) keeps one point per bucket and would drop a band extreme.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Sequence

from perfbisect.dashboards.history import RevisionPoint

# (field, keep the lowest?) per extreme kept in each bucket; a None field falls back to the value.
EXTREMES = (("value", True), ("value", False), ("ratio", True), ("ratio", False),
            ("value_min", True), ("value_max", False), ("ratio_min", True), ("ratio_max", False))
FALLBACK = {"value_min": "value", "value_max": "value", "ratio_min": "ratio", "ratio_max": "ratio"}


def pinned_positions(points: Sequence[RevisionPoint], marks: Collection[int]) -> set[int]:
    """Offsets into `points` that must survive: the points at the commit indexes `marks` (step
    edges, failed builds, wrong results) and, for each mark, the measured point just before it
    (a step is drawn from there)."""
    indexes = [p.index for p in points]
    pinned: set[int] = set()
    for mark in marks:
        at = bisect_left(indexes, mark)
        if at < len(indexes) and indexes[at] == mark:
            pinned.add(at)
        if at > 0:
            pinned.add(at - 1)
    return pinned


def _columns(points: Sequence[RevisionPoint]) -> list[tuple[list[float], bool]]:
    """Per extreme: the field's column (a missing band edge read as the line; a missing value as
    +inf for a lowest, -inf for a highest, so it is never picked) and whether the lowest is kept.
    Columns let each bucket's extreme be found by min()/max() over a slice, in C."""
    columns = []
    for name, lowest in EXTREMES:
        at, fallback = RevisionPoint._fields.index(name), RevisionPoint._fields.index(FALLBACK.get(name, name))
        missing = float("inf") if lowest else float("-inf")
        read = (p[at] if p[at] is not None else p[fallback] for p in points)
        columns.append(([missing if v is None else v for v in read], lowest))
    return columns


def _bucketed(columns: list[tuple[list[float], bool]], n: int, buckets: int) -> set[int]:
    keep: set[int] = set()
    for b in range(buckets):
        start, stop = b * n // buckets, (b + 1) * n // buckets
        if stop <= start:
            continue
        keep.update((start, stop - 1))
        for column, lowest in columns:
            part = column[start:stop]
            keep.add(start + part.index(min(part) if lowest else max(part)))
    return keep


def downsample(points: Sequence[RevisionPoint], width: int, marks: Collection[int] = ()) -> list[RevisionPoint]:
    """At most `width` points of `points` (in order) when the pinned ones fit in it (they are
    always all kept), keeping each bucket's extremes and the marked commits (see the module's
    docstring). A series of `width` points or fewer is returned whole."""
    if len(points) <= width:
        return list(points)
    pinned = pinned_positions(points, marks)
    # Up to len(EXTREMES) + 2 points per bucket, often fewer (one point holds several extremes):
    # start from the number that fills `width` in the common case and shrink until it fits.
    buckets = max(1, (width - len(pinned)) // 4)
    columns = _columns(points)
    while True:
        keep = _bucketed(columns, len(points), buckets) | pinned
        if len(keep) <= width or buckets == 1:
            return [points[i] for i in sorted(keep)]
        buckets = max(1, buckets * (width - len(pinned)) // max(1, len(keep) - len(pinned)) - 1)
