"""Verdicts for every adjacent pair of measured revisions, per case.

A pair is first judged on its own trials. Where that leaves it UNKNOWN, it is judged again on
pooled trials: each side together with the neighbours it is already judged SAME with (its
"level"), so a revision measured once can be told apart from a level holding nine. Every
comparison uses the case's per-trial noise pooled over all measured revisions, with its degrees
of freedom, so the sequential t route of `verdict.assess` can decide one trial that lies many
noise widths from a level. A pair with no revision left between its ends that pools to
DIFFERENT is a culprit candidate; the planner confirms it on the pair's own trials (`raw`). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from perfbisect.service.bisect.model import BisectConfig, Observation, Verdict
from perfbisect.service.bisect.chain import chained_step, links
from perfbisect.service.bisect.paired import Paired, block_residual, paired_comparison, step_comparison
from perfbisect.service.bisect.verdict import Comparison, assess, pooled_noise


@dataclass(frozen=True)
class PairJudgement:
    """Adjacent measured ok revisions `a < b`: per-case comparisons and the overall verdict
    (DIFFERENT if any case is, else UNKNOWN if any case is, else SAME)."""

    a: int
    b: int
    cases: Mapping[str, Comparison]
    verdict: Verdict
    closed: bool  # no unmeasured revision left strictly between a and b
    raw: Mapping[str, Comparison]  # on the pair's own trials only (side by side once measured so)
    paired: Mapping[str, Paired] = field(default_factory=dict)  # on the blocks that measured both
    linked: bool = False  # some case judged through a chain of other pairs' blocks (`chain`, issue 46)

    def blocks(self) -> int:
        """Side-by-side blocks that measured both revisions (the fewest over the cases)."""
        return min((p.blocks for p in self.paired.values()), default=0)

    def confirmed(self, alpha: float, sequential_alpha: float | None = None, replicates: int = 2,
                  rank_ready: bool = True, rank_only: Collection[str] = ()) -> Verdict:
        """The confirmation verdict on the pair's own trials, with `alpha` (rank tests) and
        `sequential_alpha` (t route) split over the cases (Bonferroni: the pair is blamed when
        any case moves, so the family-wise false alarm stays at the level). The t route needs
        `replicates` trials on each side: one trial in a rare mode of a bimodal case can look
        many noise widths away, two such trials on one side are far less likely, and a single
        outlier among them inflates the pooled noise. A raw DIFFERENT that misses both split
        levels is UNKNOWN. `rank_ready` False holds the rank route back (too few trials yet);
        the cases in `rank_only` (heavy-tailed noise, a spike) are confirmed by the rank tests only."""
        split = alpha / max(1, len(self.raw))
        seq_split = (sequential_alpha or 0.0) / max(1, len(self.raw))

        def holds(case: str, c: Comparison) -> bool:
            replicated = min(c.trials) >= replicates and case not in rank_only
            return (rank_ready and c.pvalue < split) or (replicated and c.seq_pvalue < seq_split)

        if any(c.verdict == Verdict.DIFFERENT and holds(case, c) for case, c in self.raw.items()):
            return Verdict.DIFFERENT
        verdict = _overall(self.raw)
        return Verdict.UNKNOWN if verdict == Verdict.DIFFERENT else verdict


def case_names(observations: Mapping[int, Observation], ok: Sequence[int]) -> list[str]:
    """Every case with a value at some ok revision, sorted."""
    return sorted({case for i in ok for case, v in observations[i].values.items() if len(v)})


def case_noise(observations: Mapping[int, Observation], ok: Sequence[int],
               cases: Sequence[str]) -> dict[str, float | None]:
    """Per case, the pooled per-trial standard deviation of log values over all ok revisions."""
    return {case: pooled[0] if pooled else None
            for case, pooled in case_noise_df(observations, ok, cases).items()}


def case_noise_df(observations: Mapping[int, Observation], ok: Sequence[int],
                  cases: Sequence[str]) -> dict[str, tuple[float, int] | None]:
    """Per case, the pooled per-trial standard deviation of log values over all ok revisions
    and its degrees of freedom (None while no revision has two trials)."""
    return {case: pooled_noise(observations[i].values.get(case, ()) for i in ok) for case in cases}


# A trial this many robust noise widths from its revision's median is out of a normal model's
# reach (p ~ 1e-9 a trial): the case's noise has a rare mode or outliers.
OUTLIER_WIDTHS = 6.0


def heavy_tailed(groups: Iterable[Sequence[float]]) -> bool:
    """True when some trial lies more than OUTLIER_WIDTHS robust noise widths from its revision's
    median (log values; the width is the median absolute deviation, scaled to a standard
    deviation, over all revisions with two trials or more). Then the t route's normal model
    does not hold for the case: a machine's rare slow mode can put two trials of one revision as
    far from its neighbours as a real step. One group per revision."""
    residuals = []
    for group in groups:
        if len(group) >= 2:
            logs = np.log(np.asarray(group, dtype=float))
            dev = logs - np.median(logs)
            residuals.extend(dev[dev != 0] if len(group) % 2 else dev)
    if len(residuals) < 4:
        return False
    spread = np.abs(np.asarray(residuals))
    width = 1.4826 * float(np.median(spread))
    return width > 0 and float(spread.max()) > OUTLIER_WIDTHS * width


def within_round_noise(observations: Mapping[int, Observation], ok: Sequence[int],
                       cases: Sequence[str]) -> dict[str, tuple[float, int] | None]:
    """Per case, the pooled per-trial standard deviation of log values within (revision, round)
    groups, and its degrees of freedom: the trial noise without the drift between rounds (a
    revision's trials of one round share that round's drift). Rounds not known: the revision's
    trials are one group, as `case_noise_df`. None while no group has two trials."""
    return {case: pooled_noise(group for i in ok for group in observations[i].round_values(case))
            for case in cases}


def floor_noise(observations: Mapping[int, Observation], ok: Sequence[int], cases: Sequence[str],
                config: BisectConfig) -> dict[str, float | None]:
    """Per case, the trial noise that raises the minimum effect (`effective_min_effect`). Side
    by side (`paired_blocks`), the within-round noise where known: a culprit is decided on
    within-block differences, which drift between rounds does not reach, so that drift must
    not raise the smallest step the job looks for (it hid a -5% step behind a raised 6%).
    Otherwise the pooled noise of all trials."""
    pooled = case_noise_df(observations, ok, cases)
    if config.paired_blocks:
        within = within_round_noise(observations, ok, cases)
        pooled = {case: within[case] or pooled[case] for case in cases}
    return {case: p[0] if p else None for case, p in pooled.items()}


def effective_min_effect(config: BisectConfig, noise: float | None) -> float:
    """The job's minimum effect, raised to `noise_floor` trial standard deviations."""
    if noise is None:
        return config.min_effect
    return max(config.min_effect, math.expm1(config.noise_floor * noise))


def _overall(comparisons: Mapping[str, Comparison]) -> Verdict:
    verdicts = {c.verdict for c in comparisons.values()}
    if Verdict.DIFFERENT in verdicts:
        return Verdict.DIFFERENT
    if Verdict.UNKNOWN in verdicts:
        return Verdict.UNKNOWN
    return Verdict.SAME


def _levels(raw: Sequence[Mapping[str, Comparison]], ok: Sequence[int], case: str) -> list[int]:
    """Level id per position in `ok`: consecutive revisions judged SAME share one."""
    level, ids = 0, [0]
    for comparisons in raw:
        c = comparisons.get(case)
        if c is None or c.verdict != Verdict.SAME:
            level += 1
        ids.append(level)
    return ids


def judge_pairs(observations: Mapping[int, Observation], ok: Sequence[int], unmeasured: set[int],
                config: BisectConfig) -> list[PairJudgement]:
    """Judge every adjacent pair of `ok` (sorted revision indices with trials). `unmeasured`
    are the revisions not tried yet (they decide whether a pair is closed). Touches nothing."""
    cases = case_names(observations, ok)
    pooled = case_noise_df(observations, ok, cases)
    noise = {case: p[0] if p else None for case, p in pooled.items()}
    floor = floor_noise(observations, ok, cases, config)
    values = {i: observations[i].values for i in ok}
    counts = {i: observations[i].attempts() for i in ok}  # at the cap: no more trials will come

    def one(a_vals: Sequence[float], b_vals: Sequence[float], case: str, at_cap: bool) -> Comparison:
        return assess(a_vals, b_vals, min_effect=effective_min_effect(config, floor[case]),
                      noise=noise[case], alpha=config.alpha, same_z=config.same_z, at_cap=at_cap,
                      noise_df=pooled[case][1] if pooled[case] else None,
                      sequential_alpha=config.sequential_alpha)

    residual = search_residual(observations, ok, cases, config)
    decides = 1 if config.paired_blocks and config.search_side_by_side else config.paired_blocks
    own = {side: _Side(observations, ok, side) for side in ("target", "control")}
    raw: list[dict[str, Comparison]] = []
    paired: list[dict[str, Paired]] = []
    for a, b in zip(ok, ok[1:]):
        at_cap = min(counts[a], counts[b]) >= config.max_trials
        raw.append({case: one(values[a][case], values[b][case], case, at_cap)
                    for case in cases if values[a].get(case) and values[b].get(case)})
        paired.append(_paired(observations[a], observations[b], cases, residual, config))
        for case, p in paired[-1].items():
            if p.comparison.verdict == Verdict.DIFFERENT:
                paired[-1][case] = _unless_the_control_moved(p, a, b, case, own, config)
        for case, p in paired[-1].items():  # measured side by side: the blocks alone decide
            if p.blocks >= decides:
                raw[-1][case] = p.comparison
    linked = _chain_verdicts(observations, ok, raw, paired, residual, config) if decides == 1 else set()

    pooled_by_case: dict[str, tuple[list[int], dict[int, list[float]]]] = {}
    for case in cases:
        ids = _levels(raw, ok, case)
        pools: dict[int, list[float]] = {}
        for pos, i in enumerate(ok):
            pools.setdefault(ids[pos], []).extend(values[i].get(case, ()))
        pooled_by_case[case] = (ids, pools)

    judgements = []
    for pos, (a, b) in enumerate(zip(ok, ok[1:])):
        closed = not any(a < r < b for r in unmeasured)
        comparisons = dict(raw[pos])
        for case, c in raw[pos].items():
            side_by_side = (case in paired[pos] and paired[pos][case].blocks >= decides) or (pos, case) in linked
            if c.verdict == Verdict.UNKNOWN and not side_by_side:
                ids, pools = pooled_by_case[case]
                comparisons[case] = one(pools[ids[pos]], pools[ids[pos + 1]], case, False)
        judgements.append(PairJudgement(a, b, comparisons, _overall(comparisons), closed, raw[pos], paired[pos],
                                        linked=any((pos, case) in linked for case in raw[pos])))
    return judgements


def _chain_verdicts(observations: Mapping[int, Observation], ok: Sequence[int], raw: list[dict[str, Comparison]],
                    paired: Sequence[Mapping[str, Paired]], residual: Mapping[str, tuple[float, int] | None],
                    config: BisectConfig) -> set[tuple[int, str]]:
    """Side-by-side search (issue 46): every adjacent pair without a shared block on a case, but
    joined through the job's blocks (`chain.chained_step`), is judged on that chain of drift-free
    differences instead of its trials from different rounds. Rewrites `raw` in place; returns
    the (pair position, case) so judged."""
    judged: set[tuple[int, str]] = set()
    graphs: dict[str, dict] = {}
    for pos, (a, b) in enumerate(zip(ok, ok[1:])):
        for case in list(raw[pos]):
            if case in paired[pos]:
                continue
            if case not in graphs:
                graphs[case] = links(observations, ok, case, residual[case])
            step = chained_step(graphs[case], a, b)
            if step is not None:
                res = residual[case]
                raw[pos][case] = step_comparison(step, min_effect=effective_min_effect(config, res[0] if res else None),
                                                 alpha=config.alpha, same_z=config.same_z, at_cap=False)
                judged.add((pos, case))
    return judged


def search_residual(observations: Mapping[int, Observation], ok: Sequence[int], cases: Sequence[str],
                    config: BisectConfig) -> dict[str, tuple[float, int] | None]:
    """Per case, the residual of the block model (`block_residual`); while it has no degree of
    freedom (only the search's short blocks, one trial a side, issue 46), the trial noise within
    rounds (`within_round_noise`): a short block's difference is two trials of one round."""
    residual = {case: block_residual(observations, ok, case) for case in cases}
    if not (config.paired_blocks and config.search_side_by_side) or all(residual.values()):
        return residual
    within = within_round_noise(observations, ok, cases)
    return {case: residual[case] or within[case] for case in cases}


class _Side:
    """One side of every trial (the target's own metric, or the control's) with its block
    residual per case, for `_unless_the_control_moved`; built on first use, so a round with no
    step on its blocks pays nothing for it."""

    def __init__(self, observations: Mapping[int, Observation], ok: Sequence[int], side: str) -> None:
        self._source, self._ok, self._side = observations, ok, side
        self._own: dict[int, Observation] | None = None
        self._residual: dict[str, tuple[float, int] | None] = {}

    def compare(self, a: int, b: int, case: str, min_effect: float, config: BisectConfig, at_cap: bool) -> Paired | None:
        if self._own is None:
            self._own = {i: self._source[i].own(self._side) for i in self._ok}
        if case not in self._residual:
            self._residual[case] = block_residual(self._own, self._ok, case)
        return paired_comparison(self._own[a], self._own[b], case, self._residual[case],
                                 min_effect=min_effect, alpha=config.alpha, same_z=config.same_z, at_cap=at_cap)


def _unless_the_control_moved(p: Paired, a: int, b: int, case: str, own: Mapping[str, _Side],
                              config: BisectConfig) -> Paired:
    """A ratio step confirmed on the blocks, unless the control moved with it: the control is the
    same code at both revisions, so a control step that its own blocks confirm (DIFFERENT, at the
    case's minimum effect and alpha) says what ran beside it in the trial changed, not the
    kernel. The CPU demo's RMSNorm control read 15-45% faster at one gemm commit (#945) in every
    block of two runs while the target's own GB/s stayed (2.413 -> 2.417): a false -16% and -22%
    step of the ratio. The pair is then judged on the target's own metric in the same blocks
    (ABBA order cancels the drift the control would have), with the control's step kept; its
    `before`/`after` stay the ratio's values, which the report shows.

    The control is judged at the job's own minimum effect, not at the case's raised one: a
    control that moved 17% (its blocks' p 0.0006) under a raised 20% still put most of a -23%
    ratio step there while the target's own metric moved -10%. Judging such a pair on the
    target's metric hides no real step: the kernel's change is in that metric too."""
    min_effect = p.comparison.min_effect
    control = own["control"].compare(a, b, case, config.min_effect, config, at_cap=False)
    if control is None or control.comparison.verdict != Verdict.DIFFERENT:
        return p
    target = own["target"].compare(a, b, case, min_effect, config, at_cap=p.blocks >= max_blocks(config))
    if target is None:
        return p
    return replace(target, control_step=control.comparison.rel, before=p.before, after=p.after)


def max_blocks(config: BisectConfig) -> int:
    """Side-by-side blocks one pair may get: `max_trials` trials a side in blocks."""
    return max(config.paired_blocks, config.max_trials // 2)


def _paired(a: Observation, b: Observation, cases: Sequence[str], residual: Mapping[str, tuple[float, int] | None],
            config: BisectConfig) -> dict[str, Paired]:
    """Per case, the pair judged on its shared blocks (cases without one are left out)."""
    out = {}
    for case in cases:
        res = residual[case]
        p = paired_comparison(a, b, case, res, min_effect=effective_min_effect(config, res[0] if res else None),
                              alpha=config.alpha, same_z=config.same_z, at_cap=False)
        if p is not None:
            if p.blocks >= max_blocks(config) and p.comparison.verdict == Verdict.UNKNOWN:
                p = paired_comparison(a, b, case, res, min_effect=p.comparison.min_effect, alpha=config.alpha,
                                      same_z=config.same_z, at_cap=True)
            out[case] = p
    return out
