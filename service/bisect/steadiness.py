"""Is the machine steady enough to measure on? (issue 23: an unsteady machine says so early and waits.)

The control is the same code at every revision, so its own spread over the last trials is the
machine's: a co-tenant, a memory-bandwidth neighbour, a clock policy. When that spread is above
what the minimum effect allows (`noise_floor` spreads wider than the minimum effect, the rule
the outcome's noise report uses), trials measured now mostly buy an inconclusive verdict. So the
job pauses before its next round (15, 30, 60 s by default), measures again, and judges the trials
finished since the pause; after the last pause it gives up waiting and measures on. Every pause
is kept (`Wait`) and the job's report says how long it waited and why (`report`). Once the
machine is steady again after a pause, the trials whose control made it pause are set aside
(`set_aside`): measured while the machine was disturbed, they would hold the job at its trial cap
with their noise, so it measures those revisions again instead. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfbisect.service.bisect.model import BisectConfig
from perfbisect.service.bisect.verdict import pooled_noise

# The pauses, in units of the first (15 s by default: 15, 30, 60 s), then give up. A pause helps
# only when the disturbance ends within it: a GPU co-tenant's bursts of 5-20 s do, a neighbour that
# stays for hours does not. With 60/120/240 s, a demo attention bisect on an H200 beside such a
# co-tenant was still waiting after 400 s, against 59 s quiet (bench/RESULTS.md, eleventh session).
PAUSES = (1, 2, 4)
LAST_TRIALS = 8  # the control's spread is judged over at most this many of the latest trials
MIN_TRIALS = 3  # ... and at least this many finished since the last pause


def too_unsteady(spread: float | None, config: BisectConfig) -> bool:
    """A control spread (sd of the log of its per-trial metric) beyond what the minimum effect
    allows: `noise_floor` such spreads are wider than the minimum effect."""
    return spread is not None and math.expm1(config.noise_floor * spread) > config.min_effect


@dataclass(frozen=True)
class Wait:
    """One pause: its length, the trials finished when it was decided, and the control's worst
    spread (sd of log) over the latest trials, with its case. `pause_s` 0: the job gave up
    waiting there and measured on."""

    pause_s: int
    trials: int
    spread: float
    case: str


def control_spread(control: Sequence[Mapping[str, float]]) -> tuple[str, float] | None:
    """The case whose control varied most over these trials (one mapping of case -> control's
    per-trial metric a trial), and that spread: the standard deviation of its log values. None
    while no case has two values."""
    cases = sorted({case for trial in control for case in trial})
    spreads = []
    for case in cases:
        pooled = pooled_noise([[t[case] for t in control if case in t and t[case] > 0]])
        if pooled is not None:
            spreads.append((pooled[0], case))
    if not spreads:
        return None
    spread, case = max(spreads)
    return case, spread


def check_steadiness(control: Sequence[Mapping[str, float]], config: BisectConfig,
                     waits: Sequence[Wait], first_pause_s: int = 60) -> Wait | None:
    """The pause to take before the next round, or None to go on now. `control`: per finished
    trial, oldest first, the control's metric per case; `waits`: the pauses taken so far. Only
    trials finished since the last pause are judged (the re-measurement), the latest
    `LAST_TRIALS` of them, and only when there are `MIN_TRIALS`. Unsteady: the next pause
    (`first_pause_s` times 1, 2, 4: `PAUSES`), or, all taken, a Wait of 0 s (gave up: measure on)
    once; after that, None. `first_pause_s` 0 never pauses."""
    if first_pause_s <= 0 or (waits and waits[-1].pause_s == 0):
        return None
    since = control[waits[-1].trials:] if waits else control
    if len(since) < MIN_TRIALS:
        return None
    worst = control_spread(since[-LAST_TRIALS:])
    if worst is None or not too_unsteady(worst[1], config):
        return None
    pause = first_pause_s * PAUSES[len(waits)] if len(waits) < len(PAUSES) else 0
    return Wait(pause, len(control), worst[1], worst[0])


def set_aside(control: Sequence[Mapping[str, float]], config: BisectConfig,
              waits: Sequence[Wait]) -> frozenset[int]:
    """The finished trials (indices into `control`, oldest first, as `check_steadiness` takes it)
    to leave out of the comparison: once the trials since the last pause are steady, the ones
    each pause judged unsteady (its window of at most `LAST_TRIALS`). None while the job never
    paused, is still pausing, or gave up waiting (then it measures on with every trial, and says
    so). The choice reads only the control, the same code at every revision, so it favours no
    revision; it is bounded by the pauses (at most `LAST_TRIALS` trials each)."""
    if not waits or waits[-1].pause_s == 0:
        return frozenset()
    since = control[waits[-1].trials:]
    worst = control_spread(since[-LAST_TRIALS:]) if len(since) >= MIN_TRIALS else None
    if worst is None or too_unsteady(worst[1], config):
        return frozenset()
    aside: set[int] = set()
    start = 0
    for wait in waits:
        aside.update(range(max(start, wait.trials - LAST_TRIALS), wait.trials))
        start = wait.trials
    return frozenset(aside)


def report(waits: Sequence[Wait], config: BisectConfig, set_aside: int = 0) -> str | None:
    """The report's line on waiting for a steadier machine (None when the job never waited):
    how long, why (the worst spread against what the minimum effect allows), and whether it
    gave up or, steady again, set aside `set_aside` trials measured while it was not."""
    if not waits:
        return None
    waited = sum(w.pause_s for w in waits)
    worst = max(waits, key=lambda w: w.spread)
    allowed = math.log1p(config.min_effect) / config.noise_floor
    line = (f"waited {waited} s in {sum(w.pause_s > 0 for w in waits)} pauses for a steadier machine: "
            f"the control's own spread on {worst.case} reached {math.expm1(worst.spread):.1%} over the last "
            f"trials, above the {math.expm1(allowed):.1%} that a {config.min_effect:.1%} minimum effect allows")
    if waits[-1].pause_s == 0:
        line += "; it stayed unsteady, so the job measured on (its verdicts carry that noise)"
    elif set_aside:
        line += (f"; steady again after that, so the {set_aside} trials measured while it was not were set aside "
                 "and their revisions measured again")
    return line
