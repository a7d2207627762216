"""Two stored revisions side by side, per case and fingerprint, from their per-revision medians
(no re-measuring): the base and head value and ratio, the relative change of the ratio (of the
value when there is no control) and whether the trials' ranges overlap. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from perfbisect.dashboards.history import PointRow


@dataclass(frozen=True)
class CompareRow:
    suite: str
    target: str
    case: str
    fingerprint: str | None
    base: PointRow | None
    head: PointRow | None

    @property
    def metric(self) -> str:
        both = self.base and self.head and self.base.ratio is not None and self.head.ratio is not None
        return "ratio" if both else "value"

    @property
    def change(self) -> float | None:
        """head / base - 1 of the ratio (or value); None when either side is missing."""
        if not (self.base and self.head):
            return None
        a, b = getattr(self.base, self.metric), getattr(self.head, self.metric)
        return None if not a or b is None else b / a - 1

    @property
    def overlap(self) -> bool | None:
        """Whether the trials' min..max ranges of the two revisions overlap (None without spread)."""
        if not (self.base and self.head):
            return None
        lo_a, hi_a = getattr(self.base, f"{self.metric}_min"), getattr(self.base, f"{self.metric}_max")
        lo_b, hi_b = getattr(self.head, f"{self.metric}_min"), getattr(self.head, f"{self.metric}_max")
        if None in (lo_a, hi_a, lo_b, hi_b):
            return None
        return lo_a <= hi_b and lo_b <= hi_a

    @property
    def direction(self) -> str:
        """'better', 'worse', 'within noise' (ranges overlap) or 'missing'."""
        change = self.change
        if change is None:
            return "missing"
        if self.overlap:
            return "within noise"
        higher_is_better = (self.head or self.base).higher_is_better
        return "better" if (change > 0) == higher_is_better else "worse"


def compare_rows(base: Iterable[PointRow], head: Iterable[PointRow]) -> list[CompareRow]:
    """One row per (case, fingerprint) measured at either revision, sorted by kernel and case;
    a fingerprint measured on only one side keeps its row with the other side missing."""
    keyed: dict[tuple, list[PointRow | None]] = {}
    for side, points in enumerate((base, head)):
        for p in points:
            keyed.setdefault((p.suite, p.target, p.case, p.fingerprint or ""), [None, None])[side] = p
    return [CompareRow(suite=k[0], target=k[1], case=k[2], fingerprint=k[3] or None, base=v[0], head=v[1])
            for k, v in sorted(keyed.items())]
