"""What a finished search concluded, per case and overall. Pure: no database, git or CUDA.

Per case, one of:
- regressed / improved: a confirmed culprit moved the case (a regression wins over an
  improvement when the range holds both);
- unchanged: both ends of the range were measured on the case, every pair the search judged
  is resolved, and the interval of the end-to-end step lies inside +-min_effect; `bound` is the
  largest step that interval still allows (what was ruled out is anything beyond it);
- inconclusive: measured, but the step could not be pinned (too noisy for the minimum effect,
  the trial cap reached, a step seen but never confirmed, the search not finished);
- failed: an end of the range has no value for the case (build, import, compile, CUDA missing,
  timeout, wrong results, no measurement stored), with the error of that end.
"Unchanged" is never said for what was not measured.

The overall verdict is the worst of failed > inconclusive > regressed > improved > unchanged.
A noise report per case says what the run could detect: a trial's measured spread (the decision
value's, and the control's own across trials), throttled samples, and the smallest step the
search could have told from noise (the planner's raised minimum effect).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from perfbisect.service.bisect.coverage import gap_note, widest_gap
from perfbisect.service.bisect.model import (
    BisectConfig, CaseEffect, CorrectnessFinding, Observation, Plan, RevisionState, Verdict,
)
from perfbisect.service.bisect.paired import block_residual, paired_comparison
from perfbisect.service.bisect.pairs import case_noise_df, effective_min_effect
from perfbisect.service.bisect.planner import step_effect, undecided_at_culprit
from perfbisect.service.bisect.probes import nothing_built
from perfbisect.service.bisect.spread import spread_of
from perfbisect.service.bisect.steadiness import too_unsteady

# A run whose throttled samples exceed this share of its samples gets a noise warning.
THROTTLED_SHARE = 0.05
# Target and control calls whose times differ by more than this get a warning: the control
# cancels the machine's drift only over the same stretch of time (the harness repeats the faster
# side past 5x, which narrows the gap between the stretches, not what drifts within one). The
# CPU demo's bf16 gemm, 7x its control, keeps a 5% trial spread; the 15-100x did not.
CALL_TIME_FACTOR = 10.0


class Outcome(str, Enum):
    regressed = "regressed"
    improved = "improved"
    unchanged = "unchanged"
    inconclusive = "inconclusive"
    failed = "failed"


# Worst first: the overall verdict is the first of these that any case has.
SEVERITY = (Outcome.failed, Outcome.inconclusive, Outcome.regressed, Outcome.improved, Outcome.unchanged)

FAILURE_WORDS = {
    "build_error": "build failed", "import_error": "import failed", "compile_error": "compile failed",
    "cuda_missing": "CUDA missing", "timeout": "timed out", "wrong_results": "wrong results",
    "no_measurement": "no measurement stored", "error": "error", "worker_error": "the worker failed",
}


@dataclass(frozen=True)
class Failure:
    """What kept a revision (case None: the whole trial) or one case at it from a value."""

    revision: int
    reason: str  # a key of FAILURE_WORDS
    error: str | None = None
    case: str | None = None


@dataclass(frozen=True)
class Step:
    """A confirmed culprit's move on one case: revisions first..last, the effect, its direction."""

    first: int
    last: int
    effect: CaseEffect
    regression: bool


@dataclass(frozen=True)
class CaseOutcome:
    case: str
    outcome: Outcome
    reason: str | None = None  # why (failed, inconclusive), or a note (an end failed but steps were found)
    error: str | None = None  # the failed end's error (log tail or exception)
    failed_at: int | None = None  # the end revision that failed
    bound: float | None = None  # unchanged: no step larger than this (relative, either direction)
    ci: tuple[float, float] | None = None  # the end-to-end step's interval, when both ends were measured
    steps: tuple[Step, ...] = ()
    # unchanged: the widest stretch between two revisions measured on the case (coverage.Gap), and
    # the revisions strictly inside it, none measured: a step undone in there would not be seen
    gap: tuple[int, int] | None = None
    unseen: int = 0


@dataclass(frozen=True)
class CaseNoise:
    """The raw noise inputs of one case: the control's per-trial values grouped by revision (the
    control is the same code at every revision, so its spread is the machine's), and samples."""

    control: Sequence[Sequence[float]] = ()
    throttled: int = 0
    samples: int = 0
    call_ratios: Sequence[float] = ()  # per trial: a control call's time over a target call's


@dataclass(frozen=True)
class NoiseReport:
    case: str
    noise: float | None  # per-trial spread of the decision value (sd of its log)
    control_spread: float | None  # per-trial spread of the control's own metric (sd of its log)
    throttled: int
    samples: int
    detectable: float  # the smallest relative step this run could tell from noise
    noisy: bool
    call_ratio: float | None = None  # median of a control call's time over a target call's
    call_spread: float | None = None  # within-trial spread of the calls (sd of log time, pooled; issue 46)


@dataclass(frozen=True)
class JobOutcome:
    verdict: Outcome
    cases: tuple[CaseOutcome, ...]
    noise: tuple[NoiseReport, ...] = ()
    warning: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    gap: tuple[int, int] | None = None  # the widest of the unchanged cases' gaps (CaseOutcome.gap)


def log_spread(groups: Sequence[Sequence[float]]) -> float | None:
    """Pooled within-group standard deviation of log values; None without a group of two."""
    total, df = 0.0, 0
    for group in groups:
        values = [v for v in group if v is not None and v > 0]
        if len(values) >= 2:
            logs = np.log(np.asarray(values, dtype=float))
            total += float(((logs - logs.mean()) ** 2).sum())
            df += len(values) - 1
    return math.sqrt(total / df) if df else None


def _steps(case: str, plan: Plan, config: BisectConfig) -> tuple[Step, ...]:
    return tuple(
        Step(c.first, c.last, c.effects[case], c.effects[case].is_regression(config.higher_is_better))
        for c in plan.culprits if case in c.effects and c.effects[case].moved(config.min_effect)
    )


def _end_failure(case: str, end: int, observations: Mapping[int, Observation],
                 failures: Sequence[Failure]) -> Failure | None:
    """None when the case has a value at `end`; else the most telling failure recorded there."""
    obs = observations.get(end)
    if obs is not None and len(obs.values.get(case, ())):
        return None
    mine = [f for f in failures if f.revision == end and f.case in (None, case)]
    own = [f for f in mine if f.case == case]  # the case's own failure says more than the trial's
    if own or mine:
        return (own or mine)[-1]
    return Failure(end, "error", "never measured: the search did not reach this end", case)


def _unresolved(case: str, plan: Plan, min_effect: float) -> list[tuple[int, int, str]]:
    """What keeps this case from "unchanged", as (a, b, why) per judged pair: a pair still
    DIFFERENT without a culprit there, or UNKNOWN; at a confirmed culprit (a step on other
    cases), a case not judged SAME whose step neither reaches the minimum nor is ruled out."""
    culprits = {(c.first - 1, c.last): c for c in plan.culprits}
    out = []
    for (a, b), verdicts in plan.verdicts.items():
        verdict, culprit = verdicts.get(case), culprits.get((a, b))
        if culprit is not None and case in culprit.effects:
            effect = culprit.effects[case]
            if undecided_at_culprit(verdict, effect, min_effect):
                at = f"revision {b}" if culprit.first == b else f"revisions {culprit.first}..{b}"
                out.append((a, b, f"the step at {at} (a culprit on other cases) is {_pct(effect.rel)} "
                                  f"[{_pct(effect.ci[0])}, {_pct(effect.ci[1])}] on this case: the minimum "
                                  f"effect is neither reached nor ruled out"))
        elif verdict == Verdict.UNKNOWN:
            out.append((a, b, f"the verdict stayed unknown between revisions {a} and {b}"))
        elif verdict == Verdict.DIFFERENT:
            out.append((a, b, f"a step was seen between revisions {a} and {b} but was not confirmed"))
    return sorted(out)


def _cap_note(revisions: Sequence[int], observations: Mapping[int, Observation], config: BisectConfig) -> str | None:
    capped = any(r in observations and observations[r].attempts() >= config.max_trials for r in revisions)
    return f"trial cap reached ({config.max_trials} trials per revision)" if capped else None


def _starved(observations: Mapping[int, Observation], config: BisectConfig) -> int | None:
    """A revision whose trials reached the cap with some of them failing without a value (a
    broken worker or a flaky revision), the one with the most failures; None when none did."""
    starved = [(o.failed, r) for r, o in observations.items() if o.failed and o.attempts() >= config.max_trials
               and o.state != RevisionState.unbuildable]
    return max(starved)[1] if starved else None


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


# What to check when a failure happened at every revision tried (probes.EDGE_WALK).
EVERYWHERE_HINT = {"build_error": "check the build command", "import_error": "check the target and the import root"}


def _failed_case(case: str, ends: dict[int, Failure], observations: Mapping[int, Observation]) -> CaseOutcome:
    end, failure = next(iter(sorted(ends.items())))
    side = "good" if end == 0 else "bad"
    reason = f"{FAILURE_WORDS.get(failure.reason, failure.reason)} at the {side} end"
    if failure.reason in EVERYWHERE_HINT and nothing_built(observations):
        reason += (f"; nothing built at any of the {len(observations)} revisions tried: "
                   f"{EVERYWHERE_HINT[failure.reason]}")
    return CaseOutcome(case, Outcome.failed, reason, error=failure.error, failed_at=end)


def _end_to_end(case: str, n: int, observations: Mapping[int, Observation], ok: Sequence[int],
                config: BisectConfig) -> CaseEffect | None:
    """The ends' step on their side-by-side blocks (a compare's base and head), when measured so
    on `paired_blocks` blocks: the paired interval, which drift between rounds does not widen or
    shift. None otherwise (the step on all their trials decides)."""
    if not config.paired_blocks:
        return None
    paired = paired_comparison(observations[0], observations[n - 1], case, block_residual(observations, ok, case),
                               min_effect=config.min_effect, alpha=config.alpha, same_z=config.same_z, at_cap=False)
    return paired.effect(config.confidence) if paired is not None and paired.blocks >= config.paired_blocks else None


def _measured_case(case: str, n: int, observations: Mapping[int, Observation], plan: Plan,
                   config: BisectConfig, detectable: float) -> CaseOutcome:
    """Both ends have values and no culprit moved the case: unchanged or inconclusive."""
    before, after = observations[0].values[case], observations[n - 1].values[case]
    ok = [i for i, o in observations.items() if o.state == RevisionState.ok]
    effect = _end_to_end(case, n, observations, ok, config) or step_effect(
        before, after, case_noise_df(observations, ok, [case])[case], config)
    ci = (effect.ci[0], effect.ci[1])
    if not plan.done:
        return CaseOutcome(case, Outcome.inconclusive, "the search did not finish", ci=ci)
    unresolved = _unresolved(case, plan, config.min_effect)
    bound = max(abs(ci[0]), abs(ci[1]))
    if not unresolved and bound < config.min_effect:
        reason = f"no step beyond {_pct(bound)} (minimum effect {_pct(config.min_effect)})"
        gap = widest_gap(n, [i for i in ok if len(observations[i].values.get(case, ()))])
        if gap is not None:  # never "no step" without what a step must outlast to be seen
            reason += f"; {gap_note(gap, n)}"
        return CaseOutcome(case, Outcome.unchanged, reason, bound=bound, ci=ci, unseen=gap.unseen if gap else 0,
                           gap=(gap.after, gap.before) if gap else None)
    if detectable > config.min_effect:
        why = (f"too noisy for the minimum effect: the smallest step this run could detect is {_pct(detectable)}, "
               f"over the minimum {_pct(config.min_effect)}")
    elif unresolved:
        a, b, why = unresolved[0]
        if note := _cap_note([a, b], observations, config):
            why += f": {note}"
        return CaseOutcome(case, Outcome.inconclusive, why, ci=ci)
    elif note := _cap_note([0, n - 1], observations, config):
        why = note
    else:
        why = "too noisy for the minimum effect"
    why += f"; the end-to-end step is {_pct(effect.rel)} [{_pct(ci[0])}, {_pct(ci[1])}]"
    return CaseOutcome(case, Outcome.inconclusive, why, ci=ci)


def case_noise(case: str, observations: Mapping[int, Observation], inputs: CaseNoise | None,
               config: BisectConfig) -> NoiseReport:
    """Spread of one trial's value and the smallest step the planner could tell from it."""
    noise = log_spread([o.values.get(case, ()) for o in observations.values()])
    inputs = inputs or CaseNoise()
    control = log_spread(inputs.control)
    detectable = effective_min_effect(config, noise)
    ratios = sorted(r for r in inputs.call_ratios if r and r > 0)
    call_ratio = ratios[len(ratios) // 2] if ratios else None
    calls = spread_of([t for o in observations.values() for t in o.samples.get(case, ())]).within
    report = NoiseReport(case, noise, control, inputs.throttled, inputs.samples, detectable, False, call_ratio, calls)
    return replace(report, noisy=detectable > config.min_effect or _unsteady_machine(report, config))


def _unsteady_machine(report: NoiseReport, config: BisectConfig) -> bool:
    """Samples dropped as throttled, or a control whose own spread across trials is beyond what
    the minimum effect allows (the control is the same code at every revision)."""
    throttled = report.samples > 0 and report.throttled > THROTTLED_SHARE * (report.samples + report.throttled)
    return throttled or too_unsteady(report.control_spread, config)


def _as_decided(report: NoiseReport, outcome: CaseOutcome, config: BisectConfig) -> NoiseReport:
    """One story about noise: a case ruled unchanged had every step beyond its bound ruled out
    by the trials at its ends (more trials than one trial's noise allows for), so the run could
    detect the minimum effect there, whatever one trial's spread suggested; the report says so
    instead of "the smallest step it could detect is 20%" beside "no step beyond 13.8%"."""
    if outcome.outcome != Outcome.unchanged or report.detectable <= config.min_effect:
        return report
    return replace(report, detectable=config.min_effect, noisy=_unsteady_machine(report, config))


def _warning(reports: Sequence[NoiseReport], min_effect: float) -> str | None:
    parts = [part for part in (_noise_warning(reports, min_effect), _call_time_warning(reports)) if part]
    return "; ".join(parts) or None


def _call_time_warning(reports: Sequence[NoiseReport]) -> str | None:
    """Where a target call and a control call take very different times, the worst such case."""
    far = [(max(r.call_ratio, 1 / r.call_ratio), r) for r in reports if r.call_ratio]
    far = [(times, r) for times, r in far if times > CALL_TIME_FACTOR]
    if not far:
        return None
    times, worst = max(far, key=lambda pair: pair[0])
    slower, faster = ("target", "control") if worst.call_ratio < 1 else ("control", "target")
    more = f" ({len(far)} cases)" if len(far) > 1 else ""
    return (f"a {slower} call takes {times:.0f}x a {faster} call on {worst.case}{more}: the control cancels the "
            f"machine's drift only while both take similar times (the {faster} is repeated to fill the "
            f"{slower}'s window); choose a control of similar cost")


def _noise_warning(reports: Sequence[NoiseReport], min_effect: float) -> str | None:
    noisy = [r for r in reports if r.noisy]
    if not noisy:
        return None
    worst = max(noisy, key=lambda r: (r.detectable, r.control_spread or 0.0))
    if worst.detectable <= min_effect:
        # the ratio held: what moved is the machine (the control's spread, throttled samples)
        parts = [f"unsteady machine on {worst.case}, but the smallest step this run could detect is still "
                 f"{_pct(worst.detectable)} (minimum effect {_pct(min_effect)})"]
    else:
        parts = [f"noisy run: the smallest step it could detect is {_pct(worst.detectable)} on {worst.case} "
                 f"(minimum effect {_pct(min_effect)})"]
    if worst.noise is not None:
        parts.append(f"one trial's value varies {_pct(math.expm1(worst.noise))}")
    if worst.control_spread is not None:
        parts.append(f"the control's own spread across trials is {_pct(math.expm1(worst.control_spread))}")
    throttled = sum(r.throttled for r in reports)
    if throttled:
        parts.append(f"{throttled} samples were dropped as throttled")
    if len(noisy) > 1:
        parts.append(f"{len(noisy)} cases affected")
    return "; ".join(parts)


def _wrong_at_one_end(case: str, n: int, ends: Mapping[int, Failure],
                      finding: CorrectnessFinding | None) -> CaseOutcome | None:
    """A case that gave wrong results at exactly one end, with the search's correctness finding
    for it: a decided change of correctness (regressed: wrong from first_bad; improved: fixed at
    fixed_at), not a failure to measure. None otherwise."""
    if finding is None or len(ends) != 1:
        return None
    end, failure = next(iter(ends.items()))
    if failure.reason != "wrong_results":
        return None
    if end == n - 1:
        return CaseOutcome(case, Outcome.regressed, f"wrong results from revision {finding.first_bad}",
                           error=failure.error, failed_at=end)
    if finding.fixed_at is not None:
        return CaseOutcome(case, Outcome.improved, f"wrong results fixed at revision {finding.fixed_at}",
                           error=failure.error, failed_at=end)
    return None


def decide_case(case: str, n: int, observations: Mapping[int, Observation], plan: Plan, config: BisectConfig,
                failures: Sequence[Failure], detectable: float,
                finding: CorrectnessFinding | None = None) -> CaseOutcome:
    ends = {e: f for e in (0, n - 1) if (f := _end_failure(case, e, observations, failures)) is not None}
    steps = _steps(case, plan, config)
    if not steps and (wrong := _wrong_at_one_end(case, n, ends, finding)) is not None:
        return wrong
    failed = _failed_case(case, ends, observations) if ends else None
    if steps:
        outcome = Outcome.regressed if any(s.regression for s in steps) else Outcome.improved
        note = f"{failed.reason}; the steps found inside the range stand" if failed else None
        return CaseOutcome(case, outcome, note, error=failed and failed.error,
                           failed_at=failed and failed.failed_at, steps=steps)
    if failed:
        return failed
    measured = _measured_case(case, n, observations, plan, config, detectable)
    starved = _starved(observations, config)
    if measured.outcome != Outcome.inconclusive or starved is None:
        return measured
    # Failed trials used up the budget: that, not the noise, is the first thing to fix.
    errors = [f.error for f in failures if f.revision == starved and f.case is None and f.error]
    o = observations[starved]
    why = (f"{o.failed} of the {o.attempts()} trials at revision {starved} failed without a value and its "
           f"trial cap ({config.max_trials}) was reached; {measured.reason}")
    return replace(measured, reason=why, error=errors[-1] if errors else None)


def decide(n_revisions: int, observations: Mapping[int, Observation], plan: Plan, config: BisectConfig,
           cases: Sequence[str], failures: Sequence[Failure] = (),
           noise_inputs: Mapping[str, CaseNoise] | None = None,
           correctness: Sequence[CorrectnessFinding] | None = None) -> JobOutcome:
    """The outcome of a search over revisions 0..n-1 for every requested case. `plan` is the
    planner's last answer (done for a finished job), `failures` every trial and case failure seen,
    `correctness` the wrong-results findings (default: the plan's). Raises ValueError when `cases`
    is empty. Touches nothing; deterministic."""
    if not cases:
        raise ValueError("a job has at least one case")
    noise = tuple(case_noise(c, observations, (noise_inputs or {}).get(c), config) for c in cases)
    detectable = {r.case: r.detectable for r in noise}
    findings = plan.correctness if correctness is None else correctness
    finding_of = {case: f for f in findings for case in f.cases}
    outcomes = tuple(decide_case(c, n_revisions, observations, plan, config, failures, detectable[c],
                                 finding_of.get(c)) for c in cases)
    noise = tuple(_as_decided(r, o, config) for r, o in zip(noise, outcomes))
    present = {o.outcome for o in outcomes}
    verdict = next(s for s in SEVERITY if s in present)
    counts = {s.value: sum(o.outcome == s for o in outcomes) for s in Outcome}
    gaps = [o.gap for o in outcomes if o.outcome == Outcome.unchanged and o.gap]
    gap = max(gaps, key=lambda g: (g[1] - g[0], -g[0]), default=None)
    return JobOutcome(verdict, outcomes, noise, _warning(noise, config.min_effect), counts, gap)
