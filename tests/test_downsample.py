"""Downsampling a long series keeps every marked step and the band's extremes (pure, no database)."""

from __future__ import annotations

import random

from perfbisect.dashboards.downsample import downsample
from perfbisect.dashboards.history import RevisionPoint


def _series(n: int, seed: int = 3) -> list[RevisionPoint]:
    rng = random.Random(seed)
    points = []
    for i in range(0, 2 * n, 2):  # every other commit measured: marks can fall between points
        value = 600.0 * (0.92 if i >= n else 1.0) * rng.lognormvariate(0, 0.01)
        spread = abs(rng.gauss(0, 3))
        points.append(RevisionPoint(sha=f"{i:040x}", index=i, value=value, control_value=680.0, ratio=value / 680,
                                    trials=3, value_min=value - spread, value_max=value + spread,
                                    ratio_min=(value - spread) / 680, ratio_max=(value + spread) / 680))
    return points


def test_short_series_is_returned_whole() -> None:
    points = _series(50)
    assert downsample(points, 100) == points


def test_downsampling_bounds_the_points_and_keeps_marks_and_extremes() -> None:
    points = _series(10_000)
    # a band spike and a dip in the middle of buckets, a value spike, a step between two measured commits
    points[3001] = points[3001]._replace(value_max=900.0, ratio_max=900.0 / 680)
    points[7777] = points[7777]._replace(value_min=100.0)
    points[5123] = points[5123]._replace(ratio_min=0.01)
    points[1234] = points[1234]._replace(value=1e4)
    marks = {10_000, 10_001, 4_445, 17_002}  # 10_001 and 4_445 are unmeasured (odd) commits
    kept = downsample(points, 1_400, marks)
    assert 1_000 <= len(kept) <= 1_400
    assert [p.index for p in kept] == sorted({p.index for p in kept})  # in order, no duplicates
    indexes = {p.index for p in kept}
    # every mark at a measured commit, and the measured point just before every mark
    assert {10_000, 17_002} <= indexes
    assert {9_998, 10_000, 4_444, 17_000} <= indexes
    for field, extreme in (("value_max", max), ("value_min", min), ("ratio_max", max), ("ratio_min", min),
                           ("value", max), ("value", min), ("ratio", min), ("ratio", max)):
        assert extreme(getattr(p, field) for p in kept) == extreme(getattr(p, field) for p in points), field
    # each kept point is unchanged (never averaged)
    by_index = {p.index: p for p in points}
    assert all(by_index[p.index] == p for p in kept)


def test_local_extremes_survive_not_only_the_global_ones() -> None:
    points = _series(10_000)
    spikes = range(50, 10_000, 100)  # 100 band spikes of different heights, one per stretch of 100 points
    for n, at in enumerate(spikes):
        points[at] = points[at]._replace(value_max=700.0 + n)
    kept = {p.index for p in downsample(points, 1_400)}
    assert {points[at].index for at in spikes} <= kept


def test_missing_band_falls_back_to_the_line_and_pinned_points_beyond_width_are_kept() -> None:
    points = [p._replace(value_min=None, value_max=None, ratio_min=None, ratio_max=None) for p in _series(3_000)]
    points[10] = points[10]._replace(value=1.0)
    marks = set(range(0, 6_000, 20))  # 300 marks, each pinning itself and its predecessor
    kept = downsample(points, 200, marks)
    assert {p.index for p in kept} >= marks and min(p.value for p in kept) == 1.0
