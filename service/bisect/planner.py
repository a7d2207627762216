"""The planner: from the observations so far, the trials to run next, or the culprits.

Stateless: every call re-derives the whole search from the observations, so the service can
call it from any worker after any round, and the simulator drives it the same way.

One round:
1. Measure the two ends (`endpoint_trials` each, 3: enough for a first noise estimate with 4
   degrees of freedom per case; an unbuildable end is replaced by its nearest buildable
   neighbour, but while nothing has built the walk stops `EDGE_WALK` (2) revisions in: a build
   broken everywhere ends the job in three rounds, not a build of every revision). Nothing else
   is built until both ends are known: if they are SAME on every case the job ends with no
   culprit (a regression fully recovered inside the range is invisible by design, as in any
   bisection, unless `scan` measured evenly spaced interior revisions, `replicates` trials each,
   in the same first round: every adjacent measured pair is then judged as usual). While the
   ends are UNKNOWN (the step is small against a noise estimate still poor) they get a block
   more each round.
2. Judge every adjacent pair of measured ok revisions (`pairs.judge_pairs`). Each case's noise
   is pooled over all measured revisions, with its degrees of freedom, and a pair may be
   DIFFERENT on the rank tests or, sequentially, on a t-test of its gap in those noise widths
   (`sequential_alpha`, Student's t quantile): one trial many widths from one neighbour's
   level and SAME as the other's places a revision at once.
   - UNKNOWN: add `block` trials to the side with fewer (both when equal), up to `max_trials`.
     More trials are cheaper than more builds, so no revision is built inside an UNKNOWN pair.
   - DIFFERENT with untried revisions between: an open pair; build evenly spaced revisions in it,
     `initial_trials` (one) each; of the revisions that split the pair almost as evenly as its
     midpoint, the one cheapest to build (`build_costs`, issue 45).
   - DIFFERENT with none left between: a culprit candidate, confirmed on the pair's own trials
     (Bonferroni over cases): on the t route once both sides have `replicates` (two) trials, so
     one trial in a rare mode never makes a culprit; otherwise both sides go to `confirm_trials`
     for the rank tests, then a block more while ambiguous. Confirmed, it is a culprit with a t
     interval for every case (trials as units, the pooled noise: it covers run-to-run variation).
   - Side by side (`paired_blocks` > 0, issue 23): a closed pair DIFFERENT across rounds is
     measured in ABBA blocks on one worker (`Plan.blocks`) and confirmed on their within-block
     differences alone (`paired`), so drift the control does not cancel cannot make a culprit;
     a pair SAME on its blocks is SAME (README, "Side-by-side measurement"). A case whose noise
     raised its minimum effect confirms on a block more, and a case that claims a step at a
     culprit without its own blocks confirming it gets blocks until it does or stops claiming.
   - The search side by side (`search_side_by_side`, issue 46): while `drift.drift_evident`, a
     probe inside an open pair is a short block beside the pair's nearer end (`PairBlock.short`);
     a pair that shares a block is judged on its blocks alone, one that does not but is joined to
     them through other pairs' blocks on that chain (`chain.py`), and such a pair left UNKNOWN
     gets another short block, not unpaired trials.
3. Wrong-results revisions never enter the timing comparison (a fast wrong kernel is not an
   improvement); their runs are bounded by binary search and reported as correctness findings.

Error control: every DIFFERENT needs the step to clear the minimum effect as well as the test.
The t route leans on a normal noise model whose width is estimated, hence Student's t with the
pooled degrees of freedom and a level ten times below `alpha`; its weak spot is a bimodal case
whose rare mode no trial has shown yet, which replication at the culprit guards against (a
navigation error costs trials, not precision: the stateless re-derivation recovers from it).
Two rare-mode trials on one revision defeat replication, so the rank tests alone confirm a
culprit on a case whose noise has shown a trial far outside its revision's spread
(`pairs.heavy_tailed`), and at a spike, a revision standing apart from both neighbours
(`spikes`). On a demo-like history with a 5-10% rare mode at 0.4x, 4% of simulated runs named a
false culprit without these two rules and none of 400 with them, at 8% more trials.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from perfbisect.service.bisect.coverage import auto_scan_points, refine_points
from perfbisect.service.bisect.drift import drift_evident
from perfbisect.service.bisect.effect import bootstrap_effect, t_effect
from perfbisect.service.bisect.model import (
    BisectConfig,
    CaseEffect,
    CulpritReport,
    Observation,
    PairBlock,
    Plan,
    RevisionState,
    ShapeFinding,
    TrialRequest,
    Verdict,
    step_moved,
)
from perfbisect.service.bisect.paired import Paired
from perfbisect.service.bisect.pairs import (
    PairJudgement,
    case_names,
    case_noise_df,
    effective_min_effect,
    floor_noise,
    heavy_tailed,
    judge_pairs,
    max_blocks,
    within_round_noise,
)
from perfbisect.service.bisect.probes import allocate, correctness, edge_probes, probe_references, scan_points
from perfbisect.service.bisect.shapes import plan_shapes


class _Requests:
    """Trials asked for this round, per revision; asking twice keeps the larger count. No
    revision is given more than `cap` attempts in all (failed ones count), so every round
    spends budget and the search ends."""

    def __init__(self, observations: Mapping[int, Observation], cap: int) -> None:
        self._have = {i: o.trials() for i, o in observations.items()}
        self._left = {i: max(0, cap - o.attempts()) for i, o in observations.items()}
        self._cap = cap
        self.wanted: dict[int, int] = {}
        self.blocks: dict[tuple[int, int], int] = {}
        self.probes: dict[tuple[int, int], int] = {}  # (reference, revision): short blocks (issue 46)

    def capped(self, revision: int) -> bool:
        return self._left.get(revision, self._cap) <= 0

    def _ask(self, revision: int, more: int) -> None:
        more = min(more, self._left.get(revision, self._cap))
        if more > 0:
            self.wanted[revision] = max(self.wanted.get(revision, 0), more)

    def up_to(self, revision: int, total: int) -> None:
        self._ask(revision, min(total, self._cap) - self._have.get(revision, 0))

    def new(self, revision: int, trials: int) -> None:
        self._ask(revision, trials)

    def side_by_side(self, a: int, b: int, blocks: int) -> None:
        """`blocks` ABBA blocks of a and b (the caller bounds a pair's blocks: `max_blocks`)."""
        if blocks > 0:
            self.blocks[(a, b)] = max(self.blocks.get((a, b), 0), blocks)

    def probe(self, reference: int, revision: int) -> None:
        """One short block: `revision` measured right after `reference`, on one worker."""
        self.probes[(reference, revision)] = 1

    def any(self) -> bool:
        return bool(self.wanted or self.blocks or self.probes)

    def as_tuple(self) -> tuple[TrialRequest, ...]:
        return tuple(TrialRequest(r, t) for r, t in sorted(self.wanted.items()))

    def as_blocks(self) -> tuple[PairBlock, ...]:
        full = tuple(PairBlock(a, b) for (a, b), count in sorted(self.blocks.items()) for _ in range(count))
        return full + tuple(PairBlock(a, b, short=True) for (a, b), count in sorted(self.probes.items())
                            for _ in range(count))


def searching(config: BisectConfig) -> bool:
    """The search itself measures side by side (issue 46): probes in short blocks."""
    return config.paired_blocks > 0 and config.search_side_by_side


def _escalate(a: int, b: int, counts: Mapping[int, int], config: BisectConfig, requests: _Requests) -> None:
    """UNKNOWN: a block more on the side with fewer trials (both when equal; the other side when
    the one with fewer is already at the cap)."""
    for revision, mine, other, side in ((a, counts[a], counts[b], b), (b, counts[b], counts[a], a)):
        if not requests.capped(revision) and (mine <= other or requests.capped(side)):
            requests.up_to(revision, mine + config.block)


def confirm_trials(config: BisectConfig, cases: int) -> int:
    """Trials per side before a culprit is judged: at least `confirm_trials`, and enough that n
    against n can reach the Bonferroni level alpha/cases at all (the smallest two-sided rank-test
    p for n vs n is 2/C(2n, n): 0.0079 at 5, 0.0022 at 6, 0.00058 at 7)."""
    n = config.confirm_trials
    while n < config.max_trials and 2 / math.comb(2 * n, n) >= config.alpha / max(1, cases):
        n += 1
    return n


def step_effect(before: Sequence[float], after: Sequence[float], noise: tuple[float, int] | None,
                config: BisectConfig) -> CaseEffect:
    """One case's step between two revisions: a t interval on the per-trial noise pooled over
    all measured revisions (trials as units), or a bootstrap while no revision has two trials."""
    if noise is None:
        return bootstrap_effect(before, after, confidence=config.confidence, resamples=config.bootstrap,
                                seed=config.seed)
    return t_effect(before, after, noise=noise[0], df=noise[1], confidence=config.confidence)


def _culprit(pair: PairJudgement, observations: Mapping[int, Observation], ok: Sequence[int],
             config: BisectConfig) -> CulpritReport:
    """The culprit's effect on every case: on the side-by-side blocks (the paired interval), or
    step_effect on all the pair's trials for a case the blocks did not measure. A case whose own
    verdict at the pair is not DIFFERENT keeps its effect unconfirmed (`CaseEffect.confirmed`):
    its interval may exclude 0 at a step of the job's minimum effect while the case's noise
    raised the smallest step it can tell above it (the CPU demo's RMSNorm: +20.5% [+11.3,
    +30.4] at a gemm commit, SAME at its raised 21.4%), and the report must not name a step
    that the verdict did not."""
    before, after = observations[pair.a].values, observations[pair.b].values
    noise = case_noise_df(observations, ok, sorted(pair.raw))
    effects = {}
    for case in sorted(pair.raw):
        effect = (pair.paired[case].effect(config.confidence) if case in pair.paired
                  else step_effect(before[case], after[case], noise[case], config))
        confirmed = case in pair.cases and pair.cases[case].verdict == Verdict.DIFFERENT
        effects[case] = effect if confirmed else replace(effect, confirmed=False)
    return CulpritReport(first=pair.a + 1, last=pair.b, effects=effects)


def _tighten_ends(observations: Mapping[int, Observation], ok: Sequence[int], counts: Mapping[int, int],
                  config: BisectConfig, requests: _Requests, skip: set[str],
                  ends: PairJudgement | None = None) -> None:
    """For the cases without a step: "unchanged" needs the end-to-end interval to rule out the
    minimum effect, so while it does not (and the ends are under the cap), a block more at both
    ends. When the ends are one pair measured side by side (`ends`), its paired verdict decides."""
    if ends is not None and ends.blocks() >= config.paired_blocks > 0:
        return
    if len(ok) < 2:
        return
    first, last = ok[0], ok[-1]
    before, after = observations[first].values, observations[last].values
    cases = sorted((set(before) & set(after)) - skip)
    noise = case_noise_df(observations, ok, cases)
    for case in cases:
        ci = step_effect(before[case], after[case], noise[case], config).ci
        if max(abs(ci[0]), abs(ci[1])) >= config.min_effect:
            for end in (first, last):
                requests.up_to(end, counts[end] + config.block)
            return


def _tighten_culprits(settled: Sequence[tuple[PairJudgement, CulpritReport]], observations: Mapping[int, Observation],
                      ok: Sequence[int], counts: Mapping[int, int], config: BisectConfig, requests: _Requests) -> None:
    """A culprit moves some cases; on the others the pair's verdict must be SAME, or the step must
    reach the minimum effect or be ruled out by its interval ("the size of each step per shape").
    While a case is none of these (and the pair is under the cap), a block more on the side with
    fewer trials. A case too noisy for the minimum effect (its trial noise raised the planner's)
    is not chased: more trials would not decide it, and its outcome says so."""
    if not settled:
        return
    noise = floor_noise(observations, ok, sorted({case for _, c in settled for case in c.effects}), config)
    decidable = {case for case, n in noise.items() if effective_min_effect(config, n) <= config.min_effect}
    for pair, c in settled:
        if config.paired_blocks:
            if pair.blocks() < max_blocks(config) and any(
                    unconfirmed_step(pair, case, e, config) or (case in decidable and undecided_at_culprit(
                        pair.cases[case].verdict, e, config.min_effect))
                    for case, e in c.effects.items() if case in pair.paired):
                requests.side_by_side(pair.a, pair.b, 1)
        elif any(case in decidable and undecided_at_culprit(pair.cases[case].verdict, e, config.min_effect)
                 for case, e in c.effects.items() if case in pair.cases):
            _escalate(pair.a, pair.b, counts, config, requests)


def unconfirmed_step(pair: PairJudgement, case: str, effect: CaseEffect, config: BisectConfig) -> bool:
    """A case whose step at a culprit (confirmed on other cases) reaches the minimum effect with
    an interval that excludes 0, but whose own blocks do not confirm it (DIFFERENT with the
    paired p below alpha split over the cases): a 95% interval per case per culprit, over the
    few culprits of a job and a case whose block differences vary as much as the minimum effect
    (the CPU demo's RMSNorm: 0.1 a trial), names a step that is not there now and then. More
    blocks decide it: the paired standard error falls as one over the root of their number."""
    p = pair.paired.get(case)
    return (p is not None and step_moved(effect.rel, effect.ci, config.min_effect)
            and not _holds(p, config.alpha / max(1, len(pair.raw)), config))


def _holds(p: Paired, split: float, config: BisectConfig, rank_only: bool = False) -> bool:
    """A case's paired comparison confirms a step: DIFFERENT with its p below `split` (and the
    rank tests' too for a case with a rare mode or at a spike), on `paired_blocks` blocks, one
    more for a noisy case (its noise raised its minimum effect): its block differences vary as
    much as the step it looks for, and a machine whose state flips within seconds can put two
    blocks' trials in the same pattern of states (the normal model's p leans on them being
    independent draws), so a third block must agree before its step is named."""
    noisy = p.comparison.min_effect > config.min_effect
    return (p.blocks >= config.paired_blocks + noisy and p.comparison.verdict == Verdict.DIFFERENT
            and p.comparison.pvalue < split and (not rank_only or p.rank_pvalue() < split))


def undecided_at_culprit(verdict: Verdict, effect: CaseEffect, min_effect: float) -> bool:
    """A case at a confirmed culprit (a step on other cases) that is neither judged SAME there,
    nor moved by the minimum effect, nor ruled out by the step's interval."""
    return verdict != Verdict.SAME and not effect.moved(min_effect) and not effect.ruled_out(min_effect)


def spikes(judgements: Sequence[PairJudgement]) -> set[tuple[int, int]]:
    """Pairs whose step is undone, at least half way, by the next or the previous pair on the
    same case: one revision standing apart from both neighbours. A step and its fix in the next
    commit look like this, and so do a revision's few trials that all fell in a rare slow (or
    fast) mode of the machine: two such trials are as far from the neighbours' level as a real
    step, and the t route would confirm both edges of the spike. So a spike is confirmed by the
    rank tests only, on `confirm_trials` a side, which a rare mode cannot fake."""
    flagged: set[tuple[int, int]] = set()
    for left, right in zip(judgements, judgements[1:]):
        for case in set(left.raw) & set(right.raw):
            first, second = math.log1p(left.raw[case].rel), math.log1p(right.raw[case].rel)
            if first * second >= 0:
                continue
            if left.raw[case].verdict == Verdict.DIFFERENT and abs(second) >= abs(first) / 2:
                flagged.add((left.a, left.b))
            if right.raw[case].verdict == Verdict.DIFFERENT and abs(first) >= abs(second) / 2:
                flagged.add((right.a, right.b))
    return flagged


def _settle(pair: PairJudgement, counts: Mapping[int, int], config: BisectConfig,
            requests: _Requests, rank_only: Collection[str] = ()) -> bool:
    """A closed DIFFERENT pair: True when it is confirmed on its own trials (a culprit), else
    the trials it needs. The sequential t route confirms with `replicates` trials a side; when
    that is not enough, both sides go to `confirm_trials` at once (one round, as the rank tests
    need), then a block more while the confirmation stays ambiguous."""
    fewest = min(counts[pair.a], counts[pair.b])
    confirm = min(confirm_trials(config, len(pair.raw)), config.max_trials)
    confirmed = pair.confirmed(config.alpha, config.sequential_alpha, config.replicates,
                               rank_ready=fewest >= confirm, rank_only=rank_only)
    if confirmed == Verdict.DIFFERENT:
        return True
    if fewest < confirm:
        t_route = any(case not in rank_only for case, c in pair.raw.items() if c.verdict == Verdict.DIFFERENT)
        target = config.replicates if fewest < config.replicates and t_route else confirm
        requests.up_to(pair.a, target)
        requests.up_to(pair.b, target)
    elif confirmed == Verdict.UNKNOWN:
        _escalate(pair.a, pair.b, counts, config, requests)
    return False


def _settle_side_by_side(pair: PairJudgement, config: BisectConfig, requests: _Requests,
                         rank_only: Collection[str] = ()) -> bool:
    """A closed pair that was DIFFERENT across rounds, or already measured side by side: True
    when the blocks confirm it (a culprit), else the blocks it needs. Confirmed: some case
    `_holds` (DIFFERENT on at least `paired_blocks` blocks, one more for a noisy case, with the
    paired p below alpha split over the cases: Bonferroni; a case in `rank_only`, a rare mode or
    a spike, needs the rank tests on the blocks' trials too). Settled SAME on every case: nothing
    more. Otherwise a block more (as many as make `paired_blocks`), up to `max_blocks`."""
    have = pair.blocks()
    split = config.alpha / max(1, len(pair.raw))
    if any(_holds(p, split, config, case in rank_only) for case, p in pair.paired.items()):
        return True
    decided = have >= config.paired_blocks and all(c.verdict == Verdict.SAME for c in pair.raw.values())
    if not decided and have < max_blocks(config):
        requests.side_by_side(pair.a, pair.b, max(1, config.paired_blocks - have))
    return False


def plan_next(n_revisions: int, observations: Mapping[int, Observation], config: BisectConfig) -> Plan:
    """Decide the next round. Raises ValueError when `n_revisions` < 2, an observation's index
    is outside `0..n_revisions-1`, or `max_trials` is too small for n against n trials ever to
    reach `alpha` (so nothing could be confirmed). Touches nothing; deterministic."""
    n = n_revisions
    if n < 2:
        raise ValueError("a range needs at least two revisions")
    if 2 / math.comb(2 * config.max_trials, config.max_trials) >= config.alpha:
        raise ValueError(f"max_trials={config.max_trials} can never reach alpha={config.alpha}")
    if any(not 0 <= i < n for i in observations):
        raise ValueError("observation index outside the range")
    requests = _Requests(observations, config.max_trials)
    findings, fix_probes = correctness(n, observations)

    if n == 2 and config.paired_blocks and not observations:  # a compare: its two revisions side by side at once
        requests.side_by_side(0, 1, config.paired_blocks)
        return Plan((), done=False, blocks=requests.as_blocks())
    ends = [e for e in (0, n - 1) if e not in observations] + edge_probes(n, observations)
    for end in sorted(set(ends)):
        requests.new(end, config.endpoint_trials)
    if 0 not in observations and n - 1 not in observations:  # the first round: scan with the ends
        scanned = auto_scan_points(n, config.max_gap, config.hints) if config.max_gap else scan_points(n, config.scan)
        for revision in scanned:
            requests.new(revision, config.replicates)
    for revision in fix_probes:
        requests.new(revision, config.initial_trials)
    ok = sorted(i for i, o in observations.items() if o.state == RevisionState.ok and o.trials() > 0)
    for i, o in observations.items():
        if o.state == RevisionState.ok and o.trials() == 0:
            requests.new(i, config.endpoint_trials if i in (0, n - 1) else config.initial_trials)
    if ends:  # done only when the ends' trials are spent (they failed): the outcome says so
        return Plan(requests.as_tuple(), done=not requests.wanted, correctness=tuple(findings))

    unmeasured = {r for r in range(n) if r not in observations}
    counts = {i: observations[i].trials() for i in ok}
    judgements = judge_pairs(observations, ok, unmeasured, config)
    settled, open_pairs = [], []  # settled: (pair, its culprit)
    spiked = spikes(judgements)
    heavy = {case for case in case_names(observations, ok)
             if heavy_tailed([observations[i].values.get(case, ()) for i in ok])}
    for pair in judgements:
        rank_only = set(pair.raw) if (pair.a, pair.b) in spiked else heavy
        if config.paired_blocks and pair.closed and (pair.paired or pair.verdict == Verdict.DIFFERENT):
            if _settle_side_by_side(pair, config, requests, rank_only):
                settled.append((pair, _culprit(pair, observations, ok, config)))
        elif (pair.verdict == Verdict.UNKNOWN and searching(config) and (pair.paired or pair.linked)
              and pair.blocks() < max_blocks(config)):
            requests.probe(pair.a, pair.b)  # judged on its blocks alone: another short block decides it
        elif pair.verdict == Verdict.UNKNOWN:
            _escalate(pair.a, pair.b, counts, config, requests)
        elif pair.verdict == Verdict.DIFFERENT and not pair.closed:
            open_pairs.append((pair.a, pair.b))
        elif pair.verdict == Verdict.DIFFERENT and _settle(pair, counts, config, requests, rank_only):
            settled.append((pair, _culprit(pair, observations, ok, config)))  # paired_blocks=0: no blocks
    culprits = [c for _, c in settled]
    probes = allocate(open_pairs, config.workers, observations, config.build_costs)
    noise = within_round_noise(observations, ok, case_names(observations, ok))
    if searching(config) and drift_evident(observations, ok, noise):
        # issue 46: each probe beside its pair's nearer end, in this round, on one worker
        for reference, revision in probe_references(open_pairs, probes):
            requests.probe(reference, revision)
    else:
        for revision in probes:
            requests.new(revision, config.initial_trials)
    if config.max_gap:  # --scan auto: beside a step seen, finer points (another step may sit close by)
        alike = [(p.a, p.b) for p in judgements if p.verdict == Verdict.SAME]
        moved = [(p.a, p.b) for p in judgements if p.verdict == Verdict.DIFFERENT]
        for revision in refine_points(alike, moved, config.max_gap, observations):
            requests.new(revision, config.replicates)
    if not requests.any() and not open_pairs:
        _tighten_culprits(settled, observations, ok, counts, config, requests)
        stepped = {case for c in culprits for case, e in c.effects.items() if e.ci[0] > 0 or e.ci[1] < 0}
        _tighten_ends(observations, ok, counts, config, requests, skip=stepped,
                      ends=judgements[0] if len(judgements) == 1 else None)
    shapes = _shapes(observations, ok, unmeasured, config, requests)
    wanted, blocks = requests.as_tuple(), requests.as_blocks()
    verdicts = {(p.a, p.b): {case: c.verdict for case, c in p.cases.items()} for p in judgements}
    return Plan(wanted, done=not wanted and not blocks, culprits=tuple(culprits), correctness=tuple(findings),
                open_pairs=tuple(open_pairs), verdicts=verdicts, blocks=blocks, shapes=tuple(shapes))


def _shapes(observations: Mapping[int, Observation], ok: Sequence[int], unmeasured: set[int],
            config: BisectConfig, requests: _Requests) -> list[ShapeFinding]:
    """The spread and mode search's round (`shapes.plan_shapes`), its trials added to this
    round's: `replicates` at each probe, blocks at a pair to confirm. Its confirmed findings."""
    shape = plan_shapes(observations, ok, unmeasured, config)
    for revision in shape.probes:
        requests.new(revision, config.replicates)
    for revision, total in shape.up_to.items():
        requests.up_to(revision, total)
    for (a, b), count in shape.blocks.items():
        requests.side_by_side(a, b, count)
    return shape.findings
