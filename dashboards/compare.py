"""Two stored revisions side by side, per case and fingerprint, from their per-revision medians
(no re-measuring): the base and head value and ratio, the relative change of the ratio (of the
value when there is no control) and whether the trials' ranges overlap; and from the trials'
own values the bisect's three-way verdict at a minimum effect with the step's interval and the
noise of each side (service.bisect.verdict and effect). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from perfbisect.dashboards.history import PointRow
from perfbisect.service.bisect.effect import t_effect
from perfbisect.service.bisect.model import BisectConfig
from perfbisect.service.bisect.verdict import assess, pooled_noise


@dataclass(frozen=True)
class CaseVerdict:
    """The bisect's answer for one case between two revisions: `verdict` is different, same or
    unknown at `min_effect`; `pvalue` the smaller of the rank test's and the t route's; `rel` = median(head)/median(base) - 1 with its 95% interval `ci`
    (None without a noise estimate: one trial a side); `noise` the per-trial spread (standard
    deviation of log values, about the relative spread) of base and head, None under 2 trials."""

    verdict: str
    rel: float
    ci: tuple[float, float] | None
    pvalue: float
    noise: tuple[float | None, float | None]
    trials: tuple[int, int]
    min_effect: float


def _spread(values: Sequence[float]) -> float | None:
    return float(np.std(np.log(values), ddof=1)) if len(values) >= 2 else None


def case_verdict(base: Sequence[float], head: Sequence[float], min_effect: float) -> CaseVerdict | None:
    """Compare the trials of one case (decision values: ratios or rates, all positive) as a
    bisect does: the rank test, or the sequential t route against the two sides' pooled noise
    at the bisect's default level. None when a side has no positive value (nothing to compare)."""
    base, head = [v for v in base if v and v > 0], [v for v in head if v and v > 0]
    if not base or not head:
        return None
    noise = pooled_noise([base, head])  # the two sides' own spread (the bisect pools more revisions)
    found = assess(base, head, min_effect=min_effect, noise=noise[0] if noise else None,
                   noise_df=noise[1] if noise else None, sequential_alpha=BisectConfig().sequential_alpha)
    ci = t_effect(base, head, noise=noise[0], df=noise[1]).ci if noise and noise[0] > 0 else None
    return CaseVerdict(verdict=found.verdict.value, rel=found.rel, ci=ci, pvalue=min(found.pvalue, found.seq_pvalue),
                       noise=(_spread(base), _spread(head)), trials=(len(base), len(head)), min_effect=min_effect)


@dataclass(frozen=True)
class CompareRow:
    suite: str
    target: str
    case: str
    fingerprint: str | None
    base: PointRow | None
    head: PointRow | None
    verdict: CaseVerdict | None = None

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
