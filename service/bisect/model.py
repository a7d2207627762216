"""Value types of the pure bisection engine: what the caller hands in, what the planner answers.

Revisions are indices `0..n-1` in first-parent order: 0 is the good end, n-1 the bad end.
Nothing here touches a database, git, Celery or a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class RevisionState(str, Enum):
    """What one revision's trials said about it, before any timing is looked at."""

    ok = "ok"
    unbuildable = "unbuildable"
    wrong_results = "wrong_results"


class Verdict(str, Enum):
    """Pinpoint's three-way answer for two revisions on one case."""

    DIFFERENT = "different"
    SAME = "same"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Observation:
    """One revision's state and, per case, one decision value per finished trial (the per-trial
    median of the control ratio, or of the raw metric)."""

    state: RevisionState
    values: Mapping[str, Sequence[float]] = field(default_factory=dict)
    failed: int = 0  # finished trials that gave no value (a crash or timeout at a revision that ran)
    # Per case, parallel to `values`: the side-by-side block each value was measured in (None: an
    # unpaired trial). Empty: no value was measured in a block.
    blocks: Mapping[str, Sequence[int | None]] = field(default_factory=dict)
    # Per case, parallel to `values`: the planning round each value was measured in. Empty: not
    # known (every trial of the revision is taken as one round, as before issue 23).
    rounds: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def block_values(self, case: str) -> dict[int, list[float]]:
        """This case's values measured in side-by-side blocks, by block id."""
        by_block: dict[int, list[float]] = {}
        for value, block in zip(self.values.get(case, ()), self.blocks.get(case, ())):
            if block is not None:
                by_block.setdefault(block, []).append(value)
        return by_block

    def round_values(self, case: str) -> list[list[float]]:
        """This case's values grouped by the round they were measured in (one group when the
        rounds are not known)."""
        values = self.values.get(case, ())
        rounds = self.rounds.get(case, ())
        if len(rounds) != len(values):
            return [list(values)] if values else []
        by_round: dict[int, list[float]] = {}
        for value, r in zip(values, rounds):
            by_round.setdefault(r, []).append(value)
        return list(by_round.values())
    # Cases that failed the accuracy check here. The other cases' values still count: one wrong
    # kernel says nothing about the timing of the others.
    wrong: frozenset[str] = frozenset()
    # Per case, parallel to `values` when they are ratios to the control: the target's own metric
    # of each trial (so the control's is target / ratio). Empty: not known.
    targets: Mapping[str, Sequence[float]] = field(default_factory=dict)
    # Per case, parallel to `values`: each trial's per-call samples of the target (its times, or
    # its metric) and of the control, for the spread and mode verdicts (issue 46). Empty, or an
    # empty trial: not known (the samples were not kept).
    samples: Mapping[str, Sequence[Sequence[float]]] = field(default_factory=dict)
    control_samples: Mapping[str, Sequence[Sequence[float]]] = field(default_factory=dict)

    def own(self, side: str) -> Observation:
        """The same trials and blocks with the target's own metric (`side` "target") or the
        control's ("control") as values, for the cases whose every value has its target."""
        values = {}
        for case, ratios in self.values.items():
            targets = self.targets.get(case, ())
            if len(targets) == len(ratios) and all(t > 0 for t in targets):
                values[case] = list(targets) if side == "target" else [t / r for t, r in zip(targets, ratios)]
        return Observation(self.state, values, blocks={c: self.blocks[c] for c in values if c in self.blocks})

    @property
    def is_wrong(self) -> bool:
        return self.state == RevisionState.wrong_results or bool(self.wrong)

    def trials(self) -> int:
        """Finished trials with values: the longest value list over the cases (0 for a failed build)."""
        return max((len(v) for v in self.values.values()), default=0)

    def attempts(self) -> int:
        """Every finished trial, those that gave no value included: what `max_trials` caps, so a
        revision whose trials keep failing is not asked for more forever."""
        return self.trials() + self.failed


@dataclass(frozen=True)
class BisectConfig:
    """Knobs of one bisect job.

    - `min_effect`: a relative step below this is never a culprit. The planner raises it per
      case to `noise_floor` times the measured noise of one trial's value, because a smaller
      step cannot be told from noise within `max_trials` (the raised value is what verdicts use).
    - `alpha`: Pinpoint's low threshold on the smaller p of Mann-Whitney U and Kolmogorov-Smirnov.
    - `sequential_alpha`: the level of the sequential t route (a gap of many noise widths, the
      noise pooled over all measured revisions, Student's t with its degrees of freedom), which
      decides a revision on one trial when the evidence is overwhelming; None turns it off.
      Kept ten times stricter than `alpha` because it leans on a noise model. A culprit found
      this way still needs `replicates` trials on each side.
    - `same_z`: one-sided z of the equivalence bound that a SAME verdict needs.
    - `initial_trials` for a revision inside the range (one: more only while its verdict is
      ambiguous), `endpoint_trials` for the two ends (they give the first noise estimate; more
      are added while they are ambiguous), `block` trials added to the side with fewer while
      UNKNOWN, `confirm_trials` on both sides of a culprit before the rank tests may confirm it,
      `max_trials` the cap per revision.
    - `workers`: revisions measured at once per round (W); a round measures at least one
      revision in every open pair.
    - `confidence`: of the culprit's interval (Student's t on the pooled per-trial noise).
    - `paired_blocks`: side-by-side blocks (`PairBlock`) a culprit needs before it is confirmed on
      them (two, `SIDE_BY_SIDE`: one block measured in an odd spell never makes a culprit on its
      own). 0, the default until the service's workers run blocks, turns side-by-side blocks off:
      a culprit is then confirmed on all the pair's trials, as before issue 23.
    - `search_side_by_side` (with `paired_blocks`, issue 46): a revision probed inside an open
      pair is measured in a short block (`PairBlock.short`) with the pair's nearer end, in the
      same round on one worker, and any pair that shares a block is judged on its blocks alone,
      so the search's SAME/DIFFERENT is decided within a round. False: probes are unpaired
      trials judged across rounds, as before issue 46.
    - `scan`: evenly spaced interior revisions measured with the ends in the first round, so a
      step that was undone inside the range (equal ends) can still be seen (`probes.scan_points`).
    - `max_gap` (`--scan auto`, 0: off): instead of `scan`, as many evenly spaced points as leave
      no stretch between measured revisions wider than this many commits, and finer points beside
      a pair judged DIFFERENT (`coverage`); `hints` (where a tracked history moved) are among them.
    - `build_costs`: each revision's expected build seconds now (`buildcost.expected_costs`; empty:
      unknown). Among the revisions near an open pair's midpoint that split it almost as evenly,
      the cheapest is probed (`probes.allocate`), never one that could cost a probe more.
    - `spread_ratio` (0: off): the smallest rise of a case's within-trial spread that is a
      `noisier` finding (issue 46, `shapes`); `mode_share`: the smallest share of the samples a
      new mode must carry to be a `bimodal` one. Both need the trials' samples
      (`Observation.samples`); without them nothing is judged.
    """

    min_effect: float = 0.02
    higher_is_better: bool = True
    workers: int = 1
    max_trials: int = 12
    initial_trials: int = 1
    endpoint_trials: int = 3
    block: int = 2
    confirm_trials: int = 5
    replicates: int = 2
    alpha: float = 0.01
    sequential_alpha: float | None = 0.001
    same_z: float = 1.28
    noise_floor: float = 2.0
    confidence: float = 0.95
    bootstrap: int = 2000
    seed: int = 0
    scan: int = 0
    max_gap: int = 0
    hints: tuple[int, ...] = ()
    paired_blocks: int = 0
    build_costs: tuple[float, ...] = ()
    spread_ratio: float = 1.5
    mode_share: float = 0.05
    search_side_by_side: bool = True


SIDE_BY_SIDE = 2  # `paired_blocks` for side-by-side confirmation (the simulator's --drift bench)


@dataclass(frozen=True)
class TrialRequest:
    """Run `trials` more trials at revision index `revision`."""

    revision: int
    trials: int


@dataclass(frozen=True)
class PairBlock:
    """One side-by-side block: four trials in ABBA order (`order()`), run in sequence on one
    worker, so drift the control does not cancel is shared by both revisions (a linear trend
    across the block cancels in the ABBA means). `short`: a search probe's block (issue 46),
    one trial of the reference then one of the probed revision: half the cost, and still one
    drift-free difference between them (a trend inside two trials is small beside one round's)."""

    reference: int
    revision: int
    short: bool = False

    def order(self) -> tuple[int, ...]:
        if self.short:
            return (self.reference, self.revision)
        return (self.reference, self.revision, self.revision, self.reference)


def step_moved(rel: float, ci: Sequence[float], min_effect: float, confirmed: bool = True) -> bool:
    """The one rule for "this case moved at this culprit", for the planner, the outcome, the
    reports, the merge gate and the charts alike: the step reaches the job's minimum effect, its
    interval excludes 0, and the case's own verdict at the pair confirmed it (`confirmed`)."""
    return confirmed and abs(rel) >= min_effect and (ci[0] > 0 or ci[1] < 0)


def stored_step_moved(effect: Mapping[str, Any], min_effect: float) -> bool:
    """`step_moved` of a culprit's effect as stored (Culprit.effects: rel, ci, confirmed)."""
    rel, ci = effect.get("rel"), effect.get("ci")
    if rel is None or not ci:
        return False
    return step_moved(float(rel), (float(ci[0]), float(ci[1])), min_effect, bool(effect.get("confirmed", True)))


@dataclass(frozen=True)
class CaseEffect:
    """A culprit's step on one case: `rel` = after/before - 1 of the medians of the decision
    values, its confidence interval `ci` (trials as units: it covers run-to-run variation),
    and the two medians."""

    rel: float
    ci: tuple[float, float]
    before: float
    after: float
    # The control's own step between the two revisions when it moved (the same code at both: what
    # ran beside it changed), and the step above is then the target's own metric's, not the ratio's.
    control_step: float | None = None
    # False: the case's own verdict at this pair is not DIFFERENT (its noise raised the smallest
    # step it can tell, or its trials are ambiguous), so the step is shown, never counted as one.
    confirmed: bool = True

    def is_regression(self, higher_is_better: bool) -> bool:
        """True when the step makes the case worse in the metric's own direction."""
        return self.rel < 0 if higher_is_better else self.rel > 0

    def moved(self, min_effect: float) -> bool:
        """The case's own verdict confirms the step, which reaches the minimum effect with an
        interval that excludes 0 (`step_moved`)."""
        return step_moved(self.rel, self.ci, min_effect, self.confirmed)

    def ruled_out(self, min_effect: float) -> bool:
        """The interval lies inside +-min_effect: no step of the minimum effect here."""
        return max(abs(self.ci[0]), abs(self.ci[1])) < min_effect


@dataclass(frozen=True)
class CulpritReport:
    """A step between revision `first - 1` and `last`: the culprit is one of `first..last`
    (`first == last` when exact; a range when unbuildable or wrong-results revisions hide it).
    `effects` has every case, including those the step does not move."""

    first: int
    last: int
    effects: Mapping[str, CaseEffect]


@dataclass(frozen=True)
class CorrectnessFinding:
    """`first_bad` is the first revision seen failing the accuracy check; `fixed_at` the first
    revision after it that passes again (None when it never does inside the range)."""

    first_bad: int
    fixed_at: int | None
    cases: tuple[str, ...] = ()  # the cases wrong at first_bad (empty: the whole revision, cases unknown)


@dataclass(frozen=True)
class ShapeFinding:
    """A step in a case's spread or shape (issue 46) between revision `first - 1` and `last`
    (`first == last`: exact). `kind`: "noisier" (the within-trial spread rose) or "bimodal" (a
    new mode). Spreads are sd of the log samples centred on their trial's median (~ relative),
    with bootstrap intervals; `ratio` is after/before. `mode_share` and `mode_location` (the new
    mode's share of the samples and its place relative to the main mode, +1.0: twice its value)
    for a bimodal finding. `histogram`: before and after counts over `edges` (centred log
    samples), for the job page's plot."""

    kind: str
    first: int
    last: int
    case: str
    before: float
    after: float
    before_ci: tuple[float, float]
    after_ci: tuple[float, float]
    ratio: float
    ratio_ci: tuple[float, float]
    pvalue: float
    mode_share: float | None = None
    mode_location: float | None = None
    histogram: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    edges: tuple[float, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The planner's answer for one round.

    `requests`: unpaired trials to run now (any worker, any order); `blocks`: side-by-side blocks
    to run now (each on one worker, in its order); both empty when done. `open_pairs`: adjacent measured pairs still
    judged DIFFERENT with revisions left between them. `verdicts`: per adjacent measured pair,
    per case, the current verdict."""

    requests: tuple[TrialRequest, ...]
    done: bool
    culprits: tuple[CulpritReport, ...] = ()
    correctness: tuple[CorrectnessFinding, ...] = ()
    open_pairs: tuple[tuple[int, int], ...] = ()
    verdicts: Mapping[tuple[int, int], Mapping[str, Verdict]] = field(default_factory=dict)
    blocks: tuple[PairBlock, ...] = ()
    shapes: tuple[ShapeFinding, ...] = ()  # spread and mode steps (issue 46), confirmed

    def dispatch_order(self) -> list[int]:
        """The revision of each trial to start, round-robin over the requests ([a, b, a, b, a],
        not [a, a, a, b, b]). Trials run side by side in the order they are dispatched, so a
        slow spell of the machine (a neighbour, the host) then falls on the revisions of a round
        alike instead of on all the trials of one of them: with [a, a, a, b, b] on the CPU demo,
        one revision's trials all ran beside each other in a slow spell and a docs commit came
        out 26% slower than its identical parent."""
        left: dict[int, int] = {}
        for r in self.requests:
            left[r.revision] = left.get(r.revision, 0) + r.trials
        order: list[int] = []
        while any(left.values()):
            for revision in left:
                if left[revision]:
                    order.append(revision)
                    left[revision] -= 1
        return order
