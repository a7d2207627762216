"""Bounded history payloads (issue 29): a series of N points reduced to at most `width` points
for a chart `width` points wide, keeping what a person must see. Pure.

- Pinned points stay: at each marked commit (a culprit's first and last commit, a failed build,
  wrong results) the measured points on either side, so every step is drawn where it is.
- The rest is min/max bucketing: the window is cut into equal buckets of commits, each keeps
  the points with its lowest and its highest level (ratio, else value), and the kept point
  carries the whole bucket's band (the lowest trial minimum, the highest trial maximum), so the
  band's extremes survive at any width.
Full resolution is one zoom away: the chart asks again for the narrower window.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from perfbisect.dashboards.history import RevisionPoint


def _level(p: RevisionPoint) -> float:
    return p.ratio if p.ratio is not None else p.value


def pinned(points: Sequence[RevisionPoint], marks: Iterable[int]) -> set[int]:
    """Positions (in `points`, sorted by index) of the measured points next to each marked
    commit index: the last one before it and the first one at or after it."""
    indices = [p.index for p in points]
    keep: set[int] = set()
    for mark in marks:
        at = bisect.bisect_left(indices, mark)
        keep.update(a for a in (at - 1, at) if 0 <= a < len(points))
    return keep


def _widened(p: RevisionPoint, bucket: Sequence[RevisionPoint]) -> RevisionPoint:
    def low(name: str) -> float | None:
        found = [getattr(q, name) for q in bucket if getattr(q, name) is not None]
        return min(found) if found else None

    def high(name: str) -> float | None:
        found = [getattr(q, name) for q in bucket if getattr(q, name) is not None]
        return max(found) if found else None

    return p._replace(value_min=low("value_min"), value_max=high("value_max"),
                      ratio_min=low("ratio_min"), ratio_max=high("ratio_max"))


def downsample(points: Sequence[RevisionPoint], width: int, marks: Iterable[int] = ()) -> list[RevisionPoint]:
    """At most max(width, pinned + 2) points of `points` (sorted by commit index), in order: the pinned neighbours of `marks` as they are, the rest min/max bucketed with each
    bucket's band. `points` is returned as it is when it already fits."""
    if width < 2:
        raise ValueError("width must be at least 2 points")
    if len(points) <= width:
        return list(points)
    keep = pinned(points, marks)
    buckets = max(1, (width - len(keep)) // 2)
    lo, hi = points[0].index, points[-1].index
    span = (hi - lo + 1) / buckets
    grouped: dict[int, list[int]] = {}
    for at, p in enumerate(points):
        if at not in keep:
            grouped.setdefault(min(buckets - 1, int((p.index - lo) / span)), []).append(at)
    out = {at: points[at] for at in keep}
    for members in grouped.values():
        bucket = [points[at] for at in members]
        for at in {min(members, key=lambda a: _level(points[a])), max(members, key=lambda a: _level(points[a]))}:
            out[at] = _widened(points[at], bucket)
    return [out[at] for at in sorted(out)]
