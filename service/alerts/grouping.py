"""From change points on each case's history to alerts: which steps there are, which of them
moved together, which alert each belongs to, and which later step restores an alert's level.

Pure: no database, git or Celery. Positions are indices in the tracked branch's first-parent
history (oldest first); a case's history holds the measured heads only. A step between the
measured heads at positions `before` and `after` may come from any commit of `before+1..after`.

Perfherder is the anchor: one alert per case that moved (an alert case), grouped into one alert
(Perfherder's alert summary) with every other case that moved in the same range; an alert found
again by a later detection (more heads, or a bisect that measured inside the range) is the same
alert, narrowed, and a triaged one is never raised again.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

REGRESSION, IMPROVEMENT, WRONG_RESULTS, WRONG_FIXED = "regression", "improvement", "wrong_results", "wrong_fixed"
BROKEN, BROKEN_FIXED = "broken", "broken_fixed"  # a head that fails to build or import; the next one that works
SETTLING = (WRONG_FIXED, BROKEN_FIXED)  # steps that end an alert, never raise one
UNTRIAGED = "new"
OPEN = ("new", "acknowledged", "investigating")  # statuses a detection may still move to fixed


class ChangePointLike(Protocol):
    index: int
    mean_before: float
    mean_after: float
    pvalue: float


Detector = Callable[[Sequence[float]], Sequence[ChangePointLike]]


@dataclass(frozen=True)
class CaseHistory:
    """One case on one branch with one fingerprint: `positions` of the heads measured ok (in
    order) and their `values` (the median decision value of the head's trials); `wrong` the
    positions whose trials returned wrong results."""

    case: str
    positions: tuple[int, ...]
    values: tuple[float, ...]
    wrong: tuple[int, ...] = ()
    higher_is_better: bool = True


@dataclass(frozen=True)
class Step:
    """A case changed between the measured heads at `before` and `after`."""

    case: str  # "" for a broken head: the whole head failed, no case was measured
    kind: str  # regression | improvement | wrong_results | wrong_fixed | broken | broken_fixed
    before: int
    after: int
    rel: float | None = None
    pvalue: float | None = None
    mean_before: float | None = None
    mean_after: float | None = None


def overlap(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    """The common part of two suspect ranges (before, after] or None: a step in both ranges
    happened in a commit of their intersection."""
    before, after = max(a[0], b[0]), min(a[1], b[1])
    return (before, after) if before < after else None


def perf_steps(history: CaseHistory, detector: Detector) -> list[Step]:
    """The detector's change points on the case's values, as steps between measured heads."""
    steps = []
    for cp in detector(history.values):
        worse = cp.mean_after < cp.mean_before if history.higher_is_better else cp.mean_after > cp.mean_before
        rel = cp.mean_after / cp.mean_before - 1.0 if cp.mean_before else 0.0
        steps.append(Step(history.case, REGRESSION if worse else IMPROVEMENT, history.positions[cp.index - 1],
                          history.positions[cp.index], rel, cp.pvalue, cp.mean_before, cp.mean_after))
    return steps


def side_by_side_agrees(step: Step, before: Sequence[float], after: Sequence[float], min_magnitude: float) -> bool:
    """Whether a re-measure of the step's two heads side by side (trials alternating, so both
    share the machine's load of that moment) shows it: the median after over the median before
    moves the way the step does by at least half of `min_magnitude`. A step that a busy spell
    of the machine made (heads measured at different times) is gone when both heads are
    measured at once. False without values on both sides."""
    if not before or not after or step.mean_before is None or step.mean_after is None:
        return False
    lo, hi = statistics.median(before), statistics.median(after)
    if lo <= 0:
        return False
    rel, expected = hi / lo - 1.0, step.mean_after - step.mean_before
    return rel * expected > 0 and abs(rel) >= min_magnitude / 2


def correctness_steps(history: CaseHistory) -> list[Step]:
    """Every switch between a head that passed the accuracy check and one that did not (no
    statistics: one wrong result is a failure)."""
    states = sorted([(p, False) for p in history.positions] + [(p, True) for p in history.wrong])
    steps = []
    for (p0, wrong0), (p1, wrong1) in zip(states, states[1:]):
        if wrong0 != wrong1:
            steps.append(Step(history.case, WRONG_RESULTS if wrong1 else WRONG_FIXED, p0, p1))
    return steps


def broken_steps(working: Sequence[int], broken: Sequence[int]) -> list[Step]:
    """Every switch between a head that built and ran (`working`: measured, right results or
    wrong) and one that failed to build or import (`broken`): one failure is a finding."""
    states = sorted(({p: True for p in broken} | {p: False for p in working}).items())
    return [Step("", BROKEN if now else BROKEN_FIXED, p0, p1)
            for (p0, was), (p1, now) in zip(states, states[1:]) if was != now]


def detect_steps(histories: Sequence[CaseHistory], detector: Detector) -> list[Step]:
    steps: list[Step] = []
    for history in histories:
        steps += perf_steps(history, detector) + correctness_steps(history)
    return sorted(steps, key=lambda s: (s.after, s.before, s.case))


@dataclass(frozen=True)
class StepGroup:
    """Steps of several cases inside one range: one alert."""

    before: int
    after: int
    steps: tuple[Step, ...]

    @property
    def kind(self) -> str:
        kinds = {s.kind for s in self.steps}
        return next(k for k in (BROKEN, WRONG_RESULTS, REGRESSION, IMPROVEMENT) if k in kinds)

    @property
    def magnitude(self) -> float:
        """Largest relative step of its cases (1.0 for wrong results and a broken head: they come first)."""
        return max((1.0 if s.kind in (WRONG_RESULTS, BROKEN) else abs(s.rel or 0.0)) for s in self.steps)


def group_steps(steps: Sequence[Step]) -> list[StepGroup]:
    """Group the alerting steps (all but wrong_fixed) whose ranges overlap, narrowing each group
    to the common range; a step overlapping no group starts one. Ordered by range."""
    groups: list[tuple[tuple[int, int], list[Step]]] = []
    for step in sorted(steps, key=lambda s: (s.after, s.before, s.case)):
        if step.kind in SETTLING:
            continue
        for i, (span, members) in enumerate(groups):
            common = overlap(span, (step.before, step.after))
            if (common is not None and all(m.case != step.case for m in members)
                    and (members[0].kind == BROKEN) == (step.kind == BROKEN)):  # a broken head is its own alert
                groups[i] = (common, [*members, step])
                break
        else:
            groups.append(((step.before, step.after), [step]))
    return [StepGroup(span[0], span[1], tuple(members)) for span, members in groups]


@dataclass(frozen=True)
class KnownAlert:
    """An alert already stored: its status and range (None when its commits left the history,
    e.g. after a force push) and, per case, its kind and level before the step."""

    id: int
    status: str
    kind: str
    span: tuple[int, int] | None
    levels_before: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Match:
    """What to do with one detected group: update `alert_id` (None: create an alert), narrowed
    to the group's range. `raised` is True for a new alert or one still untriaged; a triaged
    alert keeps its status (it is not raised again)."""

    group: StepGroup
    alert_id: int | None
    raised: bool


def reconcile(groups: Sequence[StepGroup], known: Sequence[KnownAlert]) -> list[Match]:
    """Match each group with the stored alert whose range overlaps it most (each alert at most
    once), else a new alert."""
    taken: set[int] = set()
    matches = []
    for group in groups:
        best, best_width = None, -1
        for alert in known:
            if alert.id in taken or alert.span is None or (alert.kind == BROKEN) != (group.kind == BROKEN):
                continue
            common = overlap(alert.span, (group.before, group.after))
            if common is not None and common[1] - common[0] > best_width:
                best, best_width = alert, common[1] - common[0]
        if best is None:
            matches.append(Match(group, None, True))
        else:
            taken.add(best.id)
            matches.append(Match(group, best.id, best.status == UNTRIAGED))
    return matches


@dataclass(frozen=True)
class Remeasure:
    """A side-by-side re-measure of the heads at `before` and `after`: per case, its trials'
    values at each; None while it runs."""

    before: int
    after: int
    values: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None


ALERT, REMEASURE, WAIT, REFUTED = "alert", "remeasure", "wait", "refuted"


def confirmation(group: StepGroup, remeasures: Mapping[tuple[int, int], Remeasure], min_magnitude: float) -> str:
    """What a new group needs before it is an alert: wrong results need nothing (one wrong result
    is a failure); a performance step is re-measured side by side once (REMEASURE, then WAIT
    while that runs) and alerts when the re-measure shows the step on any of its cases (ALERT),
    else it stays silent (REFUTED)."""
    if group.kind in (WRONG_RESULTS, BROKEN):
        return ALERT
    done = remeasures.get((group.before, group.after))
    if done is None:
        return REMEASURE
    if done.values is None:
        return WAIT
    agrees = any(side_by_side_agrees(step, *done.values.get(step.case, ((), ())), min_magnitude)
                 for step in group.steps)
    return ALERT if agrees else REFUTED


def _restores(step: Step, level: float, higher_is_better: bool, tolerance: float) -> bool:
    if step.mean_after is None:
        return False
    if higher_is_better:
        return step.mean_after >= level * (1.0 - tolerance)
    return step.mean_after <= level * (1.0 + tolerance)


def restoring_step(alert: KnownAlert, steps: Sequence[Step], higher_is_better: Mapping[str, bool],
                   tolerance: float) -> Step | None:
    """The later step that brings the alert back: for a regression, every case it regressed is
    again within `tolerance` of its level before the alert (or better); for wrong results, every
    case passes again. Returns the last of those cases' restoring steps (the alert is fixed from
    there), or None while any case is not restored or the alert is not open."""
    if alert.status not in OPEN or alert.span is None or alert.kind == IMPROVEMENT:
        return None
    if alert.kind == BROKEN:  # fixed by the next head that builds and runs
        return next((s for s in steps if s.kind == BROKEN_FIXED and s.before >= alert.span[1]), None)
    if not alert.levels_before:
        return None
    restored: list[Step] = []
    for case, level in alert.levels_before.items():
        later = [s for s in steps if s.case == case and s.before >= alert.span[1]]
        if alert.kind == WRONG_RESULTS:
            hit = next((s for s in later if s.kind == WRONG_FIXED), None)
        elif level is None:
            continue
        else:
            hit = next((s for s in later if s.kind == IMPROVEMENT
                        and _restores(s, level, higher_is_better.get(case, True), tolerance)), None)
        if hit is None:
            return None
        restored.append(hit)
    return max(restored, key=lambda s: s.after) if restored else None
