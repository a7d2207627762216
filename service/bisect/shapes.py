"""Spread and mode steps (issue 46), bisected like speed steps. Pure.

Every adjacent pair of measured ok revisions is judged per case on the trials' call samples
(`spread`): b is `noisier` when its within-trial spread rose by at least `spread_ratio` with the
one-sided Brown-Forsythe p below `alpha`, and `bimodal` when it has a new mode carrying at least
`mode_share` of the samples. Like a speed step:
- a pair that differs with untried revisions between is open: evenly spaced revisions in it are
  built (`replicates` trials each, so a probe has samples enough to judge);
- a closed pair that differs is confirmed on its own trials, at alpha split over the cases
  (Bonferroni): side by side (`paired_blocks` > 0) on the blocks that measured both, every one
  of which must see b's spread above a's (one block measured in a noisy spell never makes a
  finding), else on all the pair's trials once both sides have `replicates`.
- Never on the control's own spread: the control is the same code at both revisions, so when
  its own samples in the same trials rose as much (or grew a mode), the machine got noisier, not
  the kernel, and nothing is reported (the rule `pairs._unless_the_control_moved` applies to
  speed steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfbisect.service.bisect.model import BisectConfig, Observation, ShapeFinding
from perfbisect.service.bisect.paired import shared_blocks
from perfbisect.service.bisect.pairs import max_blocks
from perfbisect.service.bisect.probes import allocate
from perfbisect.service.bisect.spread import (
    Trials, body_ratio, histograms, modes, new_mode, rise_test, spread_rise, tail_excess, tail_grew, trial_rise,
)


@dataclass
class ShapePlan:
    """What the spread and mode search asks for this round: revisions to build inside open
    pairs (`probes`, `replicates` trials each), trials to bring a side up to (`up_to`), side-by-side
    blocks per pair (`blocks`), and the confirmed findings."""

    probes: list[int] = field(default_factory=list)
    up_to: dict[int, int] = field(default_factory=dict)
    blocks: dict[tuple[int, int], int] = field(default_factory=dict)
    findings: list[ShapeFinding] = field(default_factory=list)


def _trials(obs: Observation, case: str, blocks: Sequence[int] | None = None,
            control: bool = False) -> list[Sequence[float]]:
    """The case's per-trial samples at one revision (the control's with `control`), only those
    of the trials measured in `blocks` when given."""
    samples = (obs.control_samples if control else obs.samples).get(case, ())
    if blocks is None:
        return [s for s in samples if len(s)]
    ids = obs.blocks.get(case, ())
    if len(ids) != len(samples):
        return []
    return [s for s, k in zip(samples, ids) if k in blocks and len(s)]


# The search's level, below `alpha` split over the cases: every round judges every revision again
# against its level, and at alpha itself a third of simulated bisects with no spread step
# (large_step_two_cases) were sent after one.
NAVIGATION_STRICTER = 10
# A revision whose far calls look more at this level, but not at the search's, is ambiguous: `block`
# trials more (up to `confirm_trials`), as an UNKNOWN speed verdict gets. Only the tail: a slow path
# on a tenth of 20 calls a trial needs calls to be seen, a wider spread is seen on few, and hinting
# at it cost trials on quiet histories (large_step_two_cases: 16 trials against its target of 14).
HINT_LEVEL = 0.05
# A noisier finding's test with the trial as the unit (`spread.trial_rise`) is this many times below the
# split alpha: it runs on the pairs the search picked because their calls looked wider, so its nominal
# level flatters it. Measured (bench/spread_accuracy.py, trials' spread drawn with log sd 0.6 as on the
# demo machine, 20 seeds): at the split alpha 2 of 40 runs named a false noisier, at a fifth of it none.
TRIAL_STRICTER = 5
# Without side-by-side blocks a finding is confirmed on trials of several rounds, each re-judged
# every round: at the split alpha, 2 of 20 simulated bisects with no spread step named one.
UNPAIRED_STRICTER = 10


def seen_kind(a: Trials, b: Trials, level: float, config: BisectConfig, spread: bool = True) -> str | None:
    """"noisier" when b's robust spread rose by `spread_ratio` or more with the one-sided rank p
    below `level` (only with `spread`) and the body of its calls widened as much (far calls left
    out, `spread.body_ratio`) or no tail grew; else "bimodal" when b's far calls exceed a's by
    `mode_share` at `level` (`spread.tail_grew`); else None. The search navigates on this."""
    quick = rise_test(a, b, at_least=config.spread_ratio) if spread else None
    tail = tail_grew(a, b, level, config.mode_share)
    if quick is not None and quick[1] < level and quick[0] >= config.spread_ratio:
        # A slow path on a quarter of the calls raises the robust spread too (the median distance
        # lands in the far calls): when only the far calls grew, it is a mode, not a wider body
        # (the demo's planted self-check, one fp32 call in four: spread ratio 1.5-2, body 1.0).
        if tail is None or (body_ratio(a, b) or 0.0) >= config.spread_ratio:
            return "noisier"
        return "bimodal"
    return "bimodal" if tail is not None else None


def shape_step(a: Trials, b: Trials, level: float, config: BisectConfig, first: int = 0, last: int = 0,
               case: str = "", kind: str | None = None) -> ShapeFinding | None:
    """The spread or mode step from a's trials to b's at test level `level`, or None (`seen_kind`;
    `kind="bimodal"` asks for a mode step only, its far calls grown at `level`). A bimodal step must
    also be a new mode of the two-component fit (`spread.new_mode`) once b has samples enough for
    one; its share and location are the fit's, else the far calls'."""
    if kind == "bimodal" and tail_grew(a, b, level, config.mode_share) is None:
        return None
    kind = kind or seen_kind(a, b, level, config)
    rise = spread_rise(a, b, config.confidence, config.seed) if kind else None
    if rise is None:
        return None
    share = location = None
    if kind == "bimodal":
        mode, tail = new_mode(a, b, config.mode_share), tail_excess(a, b)
        if mode is None and modes(b) is not None or tail is None:
            return None
        share, location = (mode.share, mode.location) if mode else (tail.after - tail.before, tail.location)
    before, after, edges = histograms(a, b)
    return ShapeFinding(
        kind=kind, first=first, last=last, case=case, before=rise.before, after=rise.after,
        before_ci=rise.before_ci, after_ci=rise.after_ci, ratio=rise.ratio, ratio_ci=rise.ratio_ci,
        pvalue=rise.pvalue, mode_share=share, mode_location=location, histogram=(before, after), edges=edges)


def _every_block_agrees(a: Observation, b: Observation, case: str, blocks: Sequence[int], kind: str) -> bool:
    """In every one of `blocks`, b is worse than a the finding's way: a wider robust spread
    (noisier), or a larger share of far calls (bimodal)."""
    for k in blocks:
        before, after = _trials(a, case, [k]), _trials(b, case, [k])
        if kind == "noisier":
            rise = rise_test(before, after)
            worse = rise is not None and rise[0] > 1.0
        else:
            tail = tail_excess(before, after)
            worse = tail is not None and tail.after > tail.before
        if not worse:
            return False
    return True


def _control_moved(a: Trials, b: Trials, config: BisectConfig) -> bool:
    """The control's own samples rose in spread or grew a tail as the target's would have to
    (`seen_kind` at `alpha`, the job's own bars)."""
    return bool(a and b) and seen_kind(a, b, config.alpha, config) is not None


def _confirm(a: int, b: int, case: str, observations: Mapping[int, Observation], config: BisectConfig,
             split: float, plan: ShapePlan) -> ShapeFinding | None:
    """A closed pair seen to differ: the finding once confirmed on the pair's own trials (its
    shared blocks, side by side), else the trials to confirm it: `paired_blocks` blocks, then a
    block more while the step is still hinted (HINT_LEVEL), up to `max_blocks`; unpaired,
    `confirm_trials` a side and a level UNPAIRED_STRICTER times below the split alpha."""
    oa, ob = observations[a], observations[b]
    blocks: list[int] | None = None
    if config.paired_blocks:
        blocks = shared_blocks(oa, ob, case)
        if len(blocks) < config.paired_blocks:
            plan.blocks[(a, b)] = max(plan.blocks.get((a, b), 0), config.paired_blocks - len(blocks))
            return None
    else:  # trials from other rounds: more of them, and a level ten times stricter (as the t route's)
        short = [i for i in (a, b) if len(_trials(observations[i], case)) < config.confirm_trials]
        for i in short:
            plan.up_to[i] = config.confirm_trials
        if short:
            return None
        split /= UNPAIRED_STRICTER
    before, after = _trials(oa, case, blocks), _trials(ob, case, blocks)

    def holds(step: ShapeFinding) -> bool:
        """Every block sees it; a noisier step's interval rules out an unchanged spread, the calls'
        body widened and the trials, not only their calls, spread wider."""
        if blocks is not None and not _every_block_agrees(oa, ob, case, blocks, step.kind):
            return False
        return step.kind != "noisier" or (
            step.ratio_ci[0] > 1.0 and (body_ratio(before, after) or 0.0) >= config.spread_ratio
            and trial_rise(before, after) < split / TRIAL_STRICTER)

    step = shape_step(before, after, split, config, a + 1, b, case)
    if step is not None and not holds(step):
        # a slow path on a share of every trial's calls widens them too: judged as the mode it may be
        step = shape_step(before, after, split, config, a + 1, b, case, "bimodal") if step.kind == "noisier" else None
        step = step if step is not None and holds(step) else None
    if step is None:
        hint = seen_kind(before, after, HINT_LEVEL, config)
        if hint == "noisier" and trial_rise(before, after) >= HINT_LEVEL:  # not one trial's draw, or a mode
            hint = "bimodal" if tail_grew(before, after, HINT_LEVEL, config.mode_share) else None
        if hint is not None:
            if blocks is None:
                _one_more(a, b, len(before), len(after), config, plan)
            elif len(blocks) < max_blocks(config):
                plan.blocks[(a, b)] = max(plan.blocks.get((a, b), 0), 1)
        return None
    if _control_moved(_trials(oa, case, blocks, control=True), _trials(ob, case, blocks, control=True), config):
        return None
    return step


def _one_more(a: int, b: int, have_a: int, have_b: int, config: BisectConfig, plan: ShapePlan) -> None:
    """An ambiguous pair: `block` trials more on the side with fewer (both when equal), while
    that side has fewer than `confirm_trials`."""
    for revision, mine, other in ((a, have_a, have_b), (b, have_b, have_a)):
        if mine <= other and mine < config.confirm_trials:
            plan.up_to[revision] = max(plan.up_to.get(revision, 0), mine + config.block)


def levels(observations: Mapping[int, Observation], ok: Sequence[int], case: str, config: BisectConfig,
           plan: ShapePlan, level: float) -> list[tuple[int, int]]:
    """Walk the measured revisions from the good end: each joins the current level (the revisions
    since the last step, their trials pooled) unless `seen_kind` tells it from that level at
    `level`, which starts a new level. A slow path on a tenth of the calls is then told from the
    many calls of a level, not from one neighbour's few. Returns the steps, as (last revision of
    a level, first of the next). The spread is judged on `replicates` trials or more: a revision
    of one trial whose spread looks raised gets a second; one only hinted at (HINT_LEVEL) gets
    `block` trials more, up to `confirm_trials`."""
    steps = []
    pool: list[Sequence[float]] = []
    last = None
    for r in ok:
        mine = _trials(observations[r], case)
        if not mine:
            continue
        replicated = len(mine) >= config.replicates  # one trial's spread alone misled 1 round in 25
        if pool and seen_kind(pool, mine, level, config, spread=replicated) is not None:
            steps.append((last, r))
            pool = []
        elif not pool or len(mine) >= config.confirm_trials:
            pass
        elif not replicated and seen_kind(pool, mine, level, config) is not None:
            plan.up_to[r] = max(plan.up_to.get(r, 0), config.replicates)
        elif replicated and seen_kind(pool, mine, HINT_LEVEL, config, spread=False) is not None:
            plan.up_to[r] = max(plan.up_to.get(r, 0), len(mine) + config.block)
        pool = pool + list(mine)
        last = r
    return steps


def plan_shapes(observations: Mapping[int, Observation], ok: Sequence[int], unmeasured: set[int],
                config: BisectConfig) -> ShapePlan:
    """The spread and mode search's round over the measured ok revisions `ok` (sorted);
    `unmeasured` are the revisions not tried yet. A step between levels (`levels`) with
    revisions left untried between is an open pair (evenly spaced probes, `replicates` trials
    each); a closed one is confirmed on its own trials (`_confirm`). Nothing is judged with
    `spread_ratio` 0 or without samples."""
    plan = ShapePlan()
    cases = sorted({case for i in ok for case, s in observations[i].samples.items() if any(len(t) for t in s)})
    if not config.spread_ratio or not cases:
        return plan
    split = config.alpha / len(cases)
    open_pairs = set()
    for case in cases:
        for a, b in levels(observations, ok, case, config, plan, split / NAVIGATION_STRICTER):
            if any(a < r < b for r in unmeasured):
                open_pairs.add((a, b))
                continue
            finding = _confirm(a, b, case, observations, config, split, plan)
            if finding is not None:
                plan.findings.append(finding)
    plan.probes = allocate(sorted(open_pairs), config.workers, observations)
    return plan


def shape_json(finding: ShapeFinding) -> dict[str, Any]:
    """A spread or mode finding as JSON: the same keys the service stores for a noisier or
    bimodal culprit (`Culprit.effects[case]`), with its kind, case and range."""
    return {"kind": finding.kind, "case": finding.case, "range": [finding.first, finding.last],
            "before": finding.before, "after": finding.after, "before_ci": list(finding.before_ci),
            "after_ci": list(finding.after_ci), "ratio": finding.ratio, "ratio_ci": list(finding.ratio_ci),
            "pvalue": finding.pvalue, "mode_share": finding.mode_share, "mode_location": finding.mode_location,
            "histogram": {"before": list(finding.histogram[0]), "after": list(finding.histogram[1]),
                          "edges": list(finding.edges)}}
