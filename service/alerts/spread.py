"""Spread and mode steps on a tracked branch (issue 46): a head whose calls got noisier, or that
gained a second mode, is an alert of its own kind (`noisier`, `bimodal`), judged with the same
verdicts a bisect uses (service/bisect/shapes.py) on the heads' per-call samples. Pure.

Walking the measured heads oldest first, the heads since the last step form the level before. A
head starts a step when, with at least `MIN_HEADS` heads before it and `MIN_HEADS` heads from it
on (an alert waits for three heads after a step, as a speed step's does):
- the head alone is seen worse than the level at HINT_LEVEL (`shapes.seen_kind`): the step is
  placed at the first head that shows it, not at one before it whose later neighbours carry it;
- the level before against the `MIN_HEADS` heads from it on is a `noisier` or `bimodal` finding at
  `level` (`shapes.shape_step`: for noisier, the ratio's interval above 1 and the body of the
  calls widened as much);
- the control's own calls in the same trials did not change the same way (the machine got
  noisier, not the kernel: the rule of a bisect's `shapes._control_moved`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfbisect.service.bisect.model import BisectConfig, ShapeFinding
from perfbisect.service.bisect.shapes import HINT_LEVEL, seen_kind, shape_step
from perfbisect.service.bisect.spread import body_ratio

MIN_HEADS = 3


@dataclass(frozen=True)
class Head:
    """One measured head of a case: its position on the branch and, per trial, the target's and
    the control's per-call times."""

    position: int
    target: Sequence[Sequence[float]]
    control: Sequence[Sequence[float]] = ()


@dataclass(frozen=True)
class SpreadStep:
    """A spread or mode step of one case between the heads at `before` and `after` (positions)."""

    case: str
    before: int
    after: int
    finding: ShapeFinding


def _pooled(heads: Sequence[Head], control: bool = False) -> list[Sequence[float]]:
    return [t for h in heads for t in (h.control if control else h.target) if len(t)]


def spread_steps(case: str, heads: Sequence[Head], level: float, config: BisectConfig) -> list[SpreadStep]:
    """The spread and mode steps of one case's measured heads (oldest first), as the module
    docstring says; none with `config.spread_ratio` 0."""
    if not config.spread_ratio:
        return []
    heads = [h for h in heads if _pooled([h])]
    steps: list[SpreadStep] = []
    start = 0
    for i in range(len(heads)):
        if i - start < MIN_HEADS or i + MIN_HEADS > len(heads):
            continue
        before, after = _pooled(heads[start:i]), _pooled(heads[i:i + MIN_HEADS])
        if seen_kind(before, _pooled([heads[i]]), HINT_LEVEL, config) is None:
            continue
        finding = shape_step(before, after, level, config, heads[i].position, heads[i].position, case)
        if finding is None or finding.kind == "noisier" and (
                finding.ratio_ci[0] <= 1.0 or (body_ratio(before, after) or 0.0) < config.spread_ratio):
            continue
        control_before, control_after = _pooled(heads[start:i], True), _pooled(heads[i:i + MIN_HEADS], True)
        if control_before and control_after and seen_kind(control_before, control_after, config.alpha, config):
            continue
        steps.append(SpreadStep(case, heads[i - 1].position, heads[i].position, finding))
        start = i
    return steps
