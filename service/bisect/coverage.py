"""What a range's verdict covers, and the scan points that bound it. Pure index arithmetic.

A search sees a step only where it measured on both sides of it. Between two adjacent measured
revisions a and b, a step and its undo that both land in the commits a+1..b leave a and b
equal: nothing is seen. So "no step in this range" holds only for steps that outlast the widest
such stretch, and an unchanged verdict says how wide that stretch is (issue 46: a 20x regression
and its revert six commits later sat between two of `--scan 4`'s points in a 68-commit range).

`--scan auto` measures enough evenly spaced points with the ends that no stretch is wider than
`max_gap` commits, and (`refine_points`) cuts the stretches beside a step it saw finer: where a
scan point already differs from its neighbours, more steps nearby are likelier. Where a tracked
history already measured revisions of the range, the revisions where it moved are scanned too.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

# The default widest stretch for `--scan auto`: a step that lasts this many commits or more is
# seen wherever it sits. Six: the regression lasted six commits (a 68-commit range gets
# 11 points, stretches of at most 6 commits, 22 trials more than the ends' 6).
DEFAULT_MAX_GAP = 6


@dataclass(frozen=True)
class Gap:
    """The widest stretch between two adjacent measured revisions `after` < `before`: the
    `unseen` = before - after - 1 revisions strictly between were not measured, and a step
    undone within the `commits` = before - after commits after+1..before would not be seen."""

    after: int
    before: int

    @property
    def unseen(self) -> int:
        return self.before - self.after - 1

    @property
    def commits(self) -> int:
        return self.before - self.after


def widest_gap(n: int, measured: Collection[int]) -> Gap | None:
    """The widest stretch of unmeasured revisions between two measured ones of 0..n-1 (the
    earliest on a tie); None when fewer than two are measured or every revision between the
    first and last measured one was. Raises ValueError on an index outside the range."""
    points = sorted(set(measured))
    if any(not 0 <= p < n for p in points):
        raise ValueError("measured revision outside the range")
    gaps = [Gap(a, b) for a, b in zip(points, points[1:]) if b - a > 1]
    return max(gaps, key=lambda g: (g.unseen, -g.after)) if gaps else None


def gap_note(gap: Gap, n: int) -> str:
    """The qualifier an unchanged verdict carries: what a step would need to be missed."""
    if gap.after == 0 and gap.before == n - 1:
        return (f"only the ends were measured: a step undone within the {gap.commits} commits of the range would "
                "not be seen: run with --scan auto (or see the branch's tracked history)")
    return (f"a step undone within {gap.commits} consecutive commits would not be seen (the widest unmeasured "
            f"stretch: the {gap.unseen} revisions between revisions {gap.after} and {gap.before}); "
            f"--scan auto --max-gap N bounds it")


def points_within(lo: int, hi: int, max_gap: int) -> list[int]:
    """Evenly spaced revisions strictly between lo and hi, as few as leave no stretch wider than
    `max_gap` commits (hi - lo commits cut into k+1 parts of at most max_gap: rounding an even
    spacing of (hi-lo)/(k+1) <= max_gap to integers keeps every part <= max_gap)."""
    if max_gap < 1:
        raise ValueError("max_gap must be at least 1")
    parts = math.ceil((hi - lo) / max_gap)
    if parts <= 1:
        return []
    return sorted({lo + round(i * (hi - lo) / parts) for i in range(1, parts)})


def auto_scan_points(n: int, max_gap: int, hints: Collection[int] = ()) -> list[int]:
    """`--scan auto`: interior revisions of 0..n-1 such that no stretch between measured ones is
    wider than `max_gap` commits; the interior `hints` (where a tracked history moved,
    `history_edges`) are among them, and the even points fill the stretches between them."""
    anchors = sorted({0, n - 1, *(h for h in hints if 0 < h < n - 1)})
    points = set(anchors[1:-1])
    for a, b in zip(anchors, anchors[1:]):
        points.update(points_within(a, b, max_gap))
    return sorted(points)


def history_edges(series: Mapping[int, float], min_effect: float) -> list[int]:
    """Where a tracked history of the range moved: each revision it measured (index -> the case's
    value there, one fingerprint) whose value differs from the one measured before it by at least
    `min_effect` (relative, either way). Only a hint of where to scan: the history's values come
    from other rounds and machines, and never enter a verdict."""
    points = sorted((i, v) for i, v in series.items() if v and v > 0)
    return [i for (_, before), (i, after) in zip(points, points[1:])
            if abs(math.log(after / before)) >= math.log1p(min_effect)]


def refine_points(alike: Collection[tuple[int, int]], different: Collection[tuple[int, int]], max_gap: int,
                  measured: Collection[int]) -> list[int]:
    """Where a measured revision differs from a neighbour: each adjacent measured pair judged
    alike (`alike`) that shares a revision with a pair judged different gets the untried points
    that cut it into stretches of half `max_gap` (at least 2 commits)."""
    finer = max(2, max_gap // 2)
    beside = {r for pair in different for r in pair}
    points = {p for a, b in alike if a in beside or b in beside for p in points_within(a, b, finer)}
    return sorted(points - set(measured))
