"""Side-by-side comparisons (issue 23): two revisions judged on the blocks that measured both.

A block (`model.PairBlock`) runs `a, b, b, a` on one worker, so drift the control does not
cancel (a co-tenant slowing the target only, a burst, a slow trend, a slower GPU) is shared by
both revisions inside it, and the difference of their mean log values in one block is free of
it. Across blocks the drift differs, so only these within-block differences decide: the step
is their weighted mean, and its standard error comes from the residual of the additive block
model (revision + block), pooled over every block of the job. That residual holds what the
block does not cancel: the trial noise and any drift that changes inside a block (an ABBA
order cancels a linear one). Pure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from perfbisect.service.bisect.model import CaseEffect, Observation, Verdict
from perfbisect.service.bisect.verdict import Comparison, RankTest


@dataclass(frozen=True)
class BlockDiff:
    """One block's evidence on a pair: mean log(b) - mean log(a) and its weight (1 / the
    variance factor 1/n_a + 1/n_b of that difference)."""

    diff: float
    weight: float


def _blocks_of(observations: Mapping[Any, Observation], ok: Sequence[Any],
               case: str) -> dict[int, dict[Any, np.ndarray]]:
    """block id -> revision (or attribution arm) -> its log values in the block."""
    by_block: dict[int, dict[int, np.ndarray]] = defaultdict(dict)
    for i in ok:
        for block, values in observations[i].block_values(case).items():
            by_block[block][i] = np.log(np.asarray(values, dtype=float))
    return by_block


def _diff(a: np.ndarray, b: np.ndarray) -> BlockDiff:
    return BlockDiff(float(b.mean() - a.mean()), 1.0 / (1.0 / a.size + 1.0 / b.size))


def block_residual(observations: Mapping[Any, Observation], ok: Sequence[Any],
                   case: str) -> tuple[float, int] | None:
    """The residual standard deviation of one trial's log value in the additive block model, and
    its degrees of freedom, pooled over every two-revision block of the job: the spread of a
    revision's trials inside a block, plus the spread of a pair's block differences around
    their mean (drift that the block did not cancel). None without a degree of freedom.
    `observations` are keyed by revision index, or by attribution arm (service/bisect/attribution.py:
    each block holds the bad end and one variant); the keys must sort."""
    total, df = 0.0, 0
    pairs: dict[tuple[int, int], list[BlockDiff]] = defaultdict(list)
    for revisions in _blocks_of(observations, ok, case).values():
        if len(revisions) != 2:
            continue
        for logs in revisions.values():
            total += float(((logs - logs.mean()) ** 2).sum())
            df += logs.size - 1
        a, b = sorted(revisions)
        pairs[(a, b)].append(_diff(revisions[a], revisions[b]))
    for diffs in pairs.values():
        mean = _weighted_mean(diffs)
        total += sum(d.weight * (d.diff - mean) ** 2 for d in diffs)
        df += len(diffs) - 1
    return (math.sqrt(total / df), df) if df > 0 else None


def _weighted_mean(diffs: Sequence[BlockDiff]) -> float:
    return sum(d.weight * d.diff for d in diffs) / sum(d.weight for d in diffs)


def shared_blocks(a: Observation, b: Observation, case: str) -> list[int]:
    """Blocks that measured this case at both revisions, in id order."""
    return sorted(set(a.block_values(case)) & set(b.block_values(case)))


@dataclass(frozen=True)
class Paired:
    """A pair judged side by side on one case: the comparison (its `rel` from the mean
    within-block difference, `pvalue` the paired t-test's, `se` its standard error), the
    number of blocks, and the values the blocks held on each side."""

    comparison: Comparison
    blocks: int
    before: tuple[float, ...]
    after: tuple[float, ...]
    step: float            # mean within-block log difference
    df: int
    control_step: float | None = None  # the control's own step when it moved: this judges the target's metric

    def rank_pvalue(self) -> float:
        """The rank tests on the blocks' trials (for a case whose noise has a rare mode)."""
        return RankTest().pvalue(self.before, self.after)

    def effect(self, confidence: float) -> CaseEffect:
        """The step with its Student t interval on the paired standard error."""
        half = float(stats.t.ppf((1 + confidence) / 2, self.df)) * (self.comparison.se or 0.0)
        return CaseEffect(rel=math.expm1(self.step), ci=(math.expm1(self.step - half), math.expm1(self.step + half)),
                          before=float(np.median(self.before)), after=float(np.median(self.after)),
                          control_step=self.control_step)


@dataclass(frozen=True)
class PairedStep:
    """b against a on the blocks that measured both: the weighted mean of the within-block log
    differences, its standard error (the block model's residual over the root of the blocks'
    summed weights) with the residual's degrees of freedom, and the blocks (ids, in order)."""

    step: float
    se: float
    df: int
    blocks: tuple[int, ...]


def paired_step(a: Observation, b: Observation, case: str, residual: tuple[float, int] | None) -> PairedStep | None:
    """The step from a to b on `case` on their shared blocks alone; None when there is none, or no
    residual estimate yet."""
    blocks = shared_blocks(a, b, case)
    if not blocks or residual is None:
        return None
    a_vals, b_vals = a.block_values(case), b.block_values(case)
    diffs = [_diff(np.log(a_vals[k]), np.log(b_vals[k])) for k in blocks]
    se = residual[0] / math.sqrt(sum(d.weight for d in diffs))
    return PairedStep(_weighted_mean(diffs), se, residual[1], tuple(blocks))


def paired_comparison(a: Observation, b: Observation, case: str, residual: tuple[float, int] | None, *,
                      min_effect: float, alpha: float, same_z: float, at_cap: bool) -> Paired | None:
    """Judge revision a against b on `case` using only the blocks that measured both (None when
    there is none, or no residual estimate yet). DIFFERENT: the step reaches `min_effect` and the
    paired t-test's p is below `alpha`; SAME: |step| + same_z standard errors is below it;
    otherwise UNKNOWN (SAME `at_cap`, as for unpaired verdicts)."""
    paired = paired_step(a, b, case, residual)
    if paired is None:
        return None
    blocks, step = paired.blocks, paired.step
    a_vals, b_vals = a.block_values(case), b.block_values(case)
    before = tuple(v for k in blocks for v in a_vals[k])
    after = tuple(v for k in blocks for v in b_vals[k])
    comparison = step_comparison(paired, min_effect=min_effect, alpha=alpha, same_z=same_z, at_cap=at_cap,
                                 trials=(len(before), len(after)))
    return Paired(comparison, len(blocks), before, after, step, paired.df)


def step_comparison(paired: PairedStep, *, min_effect: float, alpha: float, same_z: float, at_cap: bool,
                    trials: tuple[int, int] = (0, 0)) -> Comparison:
    """The verdict on a drift-free log step and its standard error: DIFFERENT when it reaches
    `min_effect` with the t-test's p below `alpha`; SAME when |step| + same_z standard errors is
    below it (or `at_cap`); otherwise UNKNOWN."""
    step, se = paired.step, paired.se
    p = float(2 * stats.t.sf(abs(step) / se, paired.df)) if se > 0 else (0.0 if step else 1.0)
    threshold = math.log1p(min_effect)
    if p < alpha and abs(step) >= threshold:
        verdict = Verdict.DIFFERENT
    elif abs(step) + same_z * se < threshold or at_cap:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.UNKNOWN
    return Comparison(verdict, math.expm1(step), p, se, min_effect, p, trials)
