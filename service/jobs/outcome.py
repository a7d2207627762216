"""A finished job's outcome: the trials' failures and noise handed to the pure
`service.bisect.outcomes.decide`, its answer stored as JSON in `job.result["outcome"]`, and the
job status it implies.

Status semantics (README, "Outcomes and exit codes"):
- succeeded: every case has a verdict (regressed, improved or unchanged);
- inconclusive: every case was measured, some could not be decided (too noisy, trial cap);
- failed: some case could not be measured (build, import, compile, CUDA missing, timeout, wrong
  results or nothing stored at an end), or the planning itself failed; `job.error` says which.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from perfbisect.service.bisect import BisectConfig, Observation, Plan
from perfbisect.service.bisect.model import CorrectnessFinding, ShapeFinding
from perfbisect.service.bisect.outcomes import FAILURE_WORDS, CaseNoise, Failure, JobOutcome, Outcome, decide
from perfbisect.service.bisect.shapes import shape_json
from perfbisect.service.bisect.steadiness import Wait, check_steadiness, report, set_aside
from perfbisect.service.jobs.logs import exit_code
from perfbisect.service.job_spec import JobSpec
from perfbisect.service.models import JobStatus, Trial, TrialStatus
from perfbisect.service.settings import get_settings

ERROR_LINES, ERROR_CHARS = 8, 1200
# kernels/harness/trial.py says this when a CUDA job lands on a host whose torch sees no GPU.
NO_CUDA = "sees no CUDA device"
CASE_FAILURES = ("compile_error", "error", "wrong_results")
STATUS_OF = {Outcome.failed: JobStatus.failed, Outcome.inconclusive: JobStatus.inconclusive}


def error_tail(text: str | None) -> str | None:
    """The worker's first line of a log or exception ("build command exited 7": what anyone may
    read of it, service/jobs/logs.py) and its last lines: where the reason usually is."""
    if not text:
        return None
    head, *lines = text.strip().splitlines()
    tail = "\n".join(lines[-ERROR_LINES:])
    tail = tail if len(tail) <= ERROR_CHARS else "..." + tail[-ERROR_CHARS:]
    return "\n".join(part for part in (head[:200], "..." if len(lines) > ERROR_LINES else "", tail) if part)


def _trial_reason(trial: Trial) -> str:
    if trial.status == TrialStatus.error and NO_CUDA in (trial.failure_reason or ""):
        return "cuda_missing"
    if trial.status == TrialStatus.error and (trial.failure_reason or "").startswith("no measurement"):
        return "no_measurement"
    return trial.status.value


def failures_from(trials: Sequence[Trial], shas: Sequence[str]) -> list[Failure]:
    """Every whole-trial failure and every failed case of the finished trials, by revision index."""
    index = {sha: i for i, sha in enumerate(shas)}
    out: list[Failure] = []
    for trial in trials:
        if not trial.status.finished or trial.status == TrialStatus.cancelled:
            continue
        i = index[trial.revision.sha]
        if trial.status != TrialStatus.ok:
            out.append(Failure(i, _trial_reason(trial), error_tail(trial.failure_reason)))
        out += [Failure(i, m.status, error_tail(m.error), case=m.case.name)
                for m in trial.measurements if m.status in CASE_FAILURES]
    return out


def noise_inputs(trials: Sequence[Trial], raw: Mapping[int, dict]) -> dict[str, CaseNoise]:
    """Per case: the control's per-trial metric grouped by revision, samples kept and throttled
    (from `raw`: measurement id -> its raw samples), and each trial's control/target call times."""
    control: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    throttled: dict[str, int] = defaultdict(int)
    samples: dict[str, int] = defaultdict(int)
    call_ratios: dict[str, list[float]] = defaultdict(list)
    for trial in trials:
        if trial.status != TrialStatus.ok:
            continue
        for m in trial.measurements:
            name = m.case.name
            if m.control_value is not None:
                control[name][trial.revision_id].append(m.control_value)
            if m.ratio is not None:
                call_ratios[name].append(m.ratio)
            kept = raw.get(m.id) or {}
            throttled[name] += int(kept.get("dropped_throttled") or 0)
            samples[name] += len(kept.get("ratio") or ())
    names = set(control) | set(samples)
    return {n: CaseNoise(tuple(control[n].values()), throttled[n], samples[n], tuple(call_ratios[n])) for n in names}


def _finished_ok(trials: Sequence[Trial]) -> list[Trial]:
    return sorted((t for t in trials if t.status == TrialStatus.ok and t.finished_at is not None),
                  key=lambda t: (t.finished_at, t.id))


def control_by_trial(trials: Sequence[Trial]) -> list[dict[str, float]]:
    """Per finished ok trial, in the order they finished: the control's per-trial metric by case."""
    return [{m.case.name: m.control_value for m in t.measurements if m.control_value is not None}
            for t in _finished_ok(trials)]


def set_aside_ids(progress: Mapping[str, Any], trials: Sequence[Trial], config: BisectConfig) -> set[int]:
    """The ids of the trials left out of the comparison because the machine was unsteady while
    they ran and is steady again (steadiness.set_aside), with every other trial of their
    side-by-side blocks: a block is compared whole or not at all."""
    done = _finished_ok(trials)
    waits = [Wait(**w) for w in progress.get("waits", ())]
    aside = {done[i] for i in set_aside(control_by_trial(done), config, waits)}
    blocks = {t.block for t in aside if t.block is not None}
    return {t.id for t in trials if t in aside or (t.block is not None and t.block in blocks)}


def waits_of(progress: Mapping[str, Any], trials: Sequence[Trial], config: BisectConfig,
             plan: Plan) -> tuple[list[Wait], int]:
    """The job's pauses for a steadier machine (`progress["waits"]`), with the one to take before
    this round's trials when the control's latest trials are too unsteady (none once done), and
    that pause in seconds (0: go on now)."""
    waits = [Wait(**w) for w in progress.get("waits", ())]
    wait = None if plan.done else check_steadiness(control_by_trial(trials), config, waits,
                                                   get_settings().unsteady_pause_s)
    return waits + ([wait] if wait is not None else []), wait.pause_s if wait is not None else 0


def with_waits(result: dict[str, Any], waits: Sequence[Wait], config: BisectConfig,
               aside: int = 0) -> dict[str, Any]:
    """The result with the job's waits for a steadier machine: their report line joins the
    outcome's warning (so the report and the pull-request comment say it), `waited_s` the seconds,
    `set_aside` the trials left out as measured while the machine was unsteady."""
    line = report(waits, config, aside)
    if line is None or "outcome" not in result:
        return result
    out = result["outcome"]
    warning = "; ".join(part for part in (out.get("warning"), line) if part)
    return {**result, "outcome": {**out, "warning": warning, "waited_s": sum(w.pause_s for w in waits),
                                  "set_aside": aside}}


def waits_json(waits: Sequence[Wait]) -> list[dict[str, Any]]:
    return [asdict(w) for w in waits]


def _sha(shas: Sequence[str], i: int | None) -> str | None:
    return None if i is None else shas[i]


def _gap(shas: Sequence[str], gap: tuple[int, int] | None) -> dict[str, Any] | None:
    """JSON of a coverage gap (schemas.GapRead)."""
    if gap is None:
        return None
    after, before = gap
    return {"after_sha": shas[after], "before_sha": shas[before], "commits": before - after,
            "unseen": before - after - 1}


def _failure_rows(failures: Sequence[Failure], shas: Sequence[str]) -> list[dict[str, Any]]:
    grouped: dict[tuple[int, str, str | None], list[Failure]] = defaultdict(list)
    for f in failures:
        grouped[(f.revision, f.reason, f.case)].append(f)
    return [{"sha": shas[i], "reason": reason, "words": FAILURE_WORDS.get(reason, reason), "case": case,
             "trials": len(fs), "error": fs[-1].error}
            for (i, reason, case), fs in sorted(grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or ""))]


def environment(trials: Sequence[Trial]) -> dict[str, Any] | None:
    """Device and toolchain as the harness saw them (the first trial that reported them)."""
    for trial in trials:
        if trial.provenance and trial.provenance.get("name"):
            return {k: trial.provenance.get(k) for k in ("kind", "name", "driver", "cuda", "torch", "triton", "python")}
    return None


def to_dict(outcome: JobOutcome, shas: Sequence[str], failures: Sequence[Failure]) -> dict[str, Any]:
    """JSON for job.result["outcome"] (read back by schemas.OutcomeRead)."""
    return {
        "verdict": outcome.verdict.value, "counts": dict(outcome.counts), "warning": outcome.warning,
        "gap": _gap(shas, outcome.gap),
        "cases": [{
            "case": c.case, "outcome": c.outcome.value, "reason": c.reason, "error": c.error,
            "failed_at": _sha(shas, c.failed_at), "bound": c.bound, "ci": list(c.ci) if c.ci else None,
            "unseen": c.unseen, "gap": _gap(shas, c.gap),
            "steps": [{"first_sha": shas[s.first], "last_sha": shas[s.last], "rel": s.effect.rel,
                       "ci": list(s.effect.ci), "regression": s.regression} for s in c.steps],
        } for c in outcome.cases],
        "noise": [{"case": r.case, "noise": r.noise, "control_spread": r.control_spread, "throttled": r.throttled,
                   "samples": r.samples, "detectable": r.detectable, "noisy": r.noisy, "call_spread": r.call_spread}
                  for r in outcome.noise],
        "failures": _failure_rows(failures, shas),
    }


def summary(outcome: JobOutcome) -> str | None:
    """One line for job.error when the job did not reach a verdict for every case."""
    bad = [c for c in outcome.cases if c.outcome in (Outcome.failed, Outcome.inconclusive)]
    if not bad:
        return None
    first = bad[0]
    detail = f"{first.case}: {first.reason}"
    code = exit_code(first.error)  # never the log's text: job.error is public (service/jobs/logs.py)
    if code is not None:
        detail += f" (exit {code})"
    words = "could not be measured" if outcome.verdict == Outcome.failed else "could not be decided"
    return f"{len(bad)} of {len(outcome.cases)} case(s) {words}; {detail}"


def conclude(shas: Sequence[str], spec: JobSpec, trials: Sequence[Trial],
             observations: dict[int, Observation], plan: Plan, config: BisectConfig,
             raw: Mapping[int, dict], findings: Sequence[CorrectnessFinding] | None = None,
             ) -> tuple[JobStatus, str | None, dict]:
    """(status, error, result JSON) of a job whose planner is done (or gave up); `raw` holds
    the measurements' raw samples (for the noise report), `findings` the wrong-results runs
    (default: the plan's)."""
    failures = failures_from(trials, shas)
    cases = spec.case_names()
    outcome = decide(len(shas), observations, plan, config, cases, failures, noise_inputs(trials, raw), findings)
    status = STATUS_OF.get(outcome.verdict, JobStatus.succeeded)
    error = summary(outcome)
    if not plan.done:
        status, error = JobStatus.failed, "the planner asked for no trials but is not done"
    return status, error, {"outcome": {**to_dict(outcome, shas, failures), "environment": environment(trials),
                                       "shapes": [shape_dict(f, shas) for f in plan.shapes]}}


def shape_dict(finding: ShapeFinding, shas: Sequence[str]) -> dict[str, Any]:
    """JSON of a spread or mode finding (issue 46) for job.result["outcome"]["shapes"] (read back
    by schemas.ShapeRead): the simulator's keys (`simulate.shape_json`), the range as shas."""
    out = shape_json(finding)
    first, last = out.pop("range")
    return {**out, "first_sha": shas[first], "last_sha": shas[last], "exact": first == last}
