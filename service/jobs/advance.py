"""Advance a job by one planning round: read its finished trials, ask the pure planner what to
measure next, write the new pending trials (or the culprits when it is done).

Runs inside the `advance_job` task's transaction; returns the trial ids that the task enqueues
after its commit. The job row is locked (FOR UPDATE on PostgreSQL) so two workers finishing
trials at once cannot plan the same round twice.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from perfbisect.service.bisect import BisectConfig, CorrectnessFinding, Observation, Plan, RevisionState, plan_next
from perfbisect.service.bisect.coverage import DEFAULT_MAX_GAP, history_edges
from perfbisect.service.bisect.model import SIDE_BY_SIDE, PairBlock
from perfbisect.service.bisect.progress import expected_build_s, expected_trials
from perfbisect.service.bisect.probes import nothing_built
from perfbisect.service.attribution import fixcheck
from perfbisect.service.attribution import service as attribution
from perfbisect.service.hunks import service as hunks
from perfbisect.service.errors import NotFound
from perfbisect.service.jobs import descent, outcome, repository, resolution, sweep
from perfbisect.service.jobs.buildcosts import job_build_costs
from perfbisect.service.jobs.schemas import AUTO_SCAN, AUTO_SCAN_ABOVE
from perfbisect.service.models import (Culprit, CulpritKind, Job, JobKind, JobStatus, Revision, Trial, TrialStatus,
                                       utcnow)
from perfbisect.service.repos.repository import revisions_by_sha
from perfbisect.service.trials.repository import samples_of

UNBUILDABLE = (TrialStatus.build_error, TrialStatus.import_error, TrialStatus.timeout, TrialStatus.error)
WORKER_RETRIES = 3  # a revision whose every trial failed on the worker is tried this often, then skipped
BROKEN_CASE = ("compile_error", "error")


def observations_from(trials: Sequence[Trial], shas: Sequence[str], metric: str,
                      raw: Mapping[int, dict] | None = None) -> dict[int, Observation]:
    """Per revision index: its state and, per case, one decision value per finished trial.
    A case that failed the accuracy check is recorded as wrong there and gives no value; the
    other cases of the trial keep theirs (the revision stays ok for them), and only a revision
    where every case was wrong is wrong_results as a whole. It is unbuildable only when no trial
    of it ran (one timeout among good trials is noise, not a broken revision). A trial the worker
    failed (worker_error) tells nothing of the revision: it only counts against the cap, and a
    revision with nothing else is left unobserved (so tried again) until WORKER_RETRIES such
    failures, then skipped like one that does not build. Each value keeps the side-by-side block
    its trial was measured in (`Observation.blocks`; None for an unpaired trial), so the planner
    can confirm a culprit on within-block differences, and the planning round it was sent in
    (`Observation.rounds`: the trials of one round share their `dispatched_at`; a trial sent again
    is a round of its own, one never sent round 0), so the trial noise within rounds is known
    (issues 23 and 46). With `raw` (measurement id -> its raw samples), each value also keeps its
    trial's per-call target and control times, for the spread and mode verdicts (issue 46; an
    empty trial where none were kept)."""
    index = {sha: i for i, sha in enumerate(shas)}
    sent = sorted({t.dispatched_at for t in trials if t.dispatched_at is not None})
    round_of = {at: number for number, at in enumerate(sent, start=1)}
    rounds: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    blocks: dict[int, dict[str, list[int | None]]] = defaultdict(lambda: defaultdict(list))
    targets: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    calls: dict[int, dict[str, list[tuple[float, ...]]]] = defaultdict(lambda: defaultdict(list))
    control_calls: dict[int, dict[str, list[tuple[float, ...]]]] = defaultdict(lambda: defaultdict(list))
    seen: dict[int, set[RevisionState]] = defaultdict(set)
    wrong: dict[int, set[str]] = defaultdict(set)
    failed: dict[int, int] = defaultdict(int)  # trials that gave no value: they count against the cap
    for trial in trials:
        if not trial.status.finished or trial.status == TrialStatus.cancelled:
            continue
        i = index[trial.revision.sha]
        if trial.status == TrialStatus.worker_error:
            failed[i] += 1
            continue
        if trial.status in UNBUILDABLE or any(m.status in BROKEN_CASE for m in trial.measurements):
            seen[i].add(RevisionState.unbuildable)
            failed[i] += 1
            continue
        wrong[i] |= {m.case.name for m in trial.measurements if m.status == "wrong_results"}
        gave = False
        for m in trial.measurements:
            value = m.ratio if metric == "ratio" else m.value
            if m.status == "ok" and value is not None:
                values[i][m.case.name].append(value)
                blocks[i][m.case.name].append(trial.block)
                rounds[i][m.case.name].append(round_of.get(trial.dispatched_at, 0))
                if metric == "ratio" and m.value is not None:
                    targets[i][m.case.name].append(m.value)
                if raw is not None:
                    kept = raw.get(m.id) or {}
                    calls[i][m.case.name].append(_times(kept.get("target_ms")))
                    control_calls[i][m.case.name].append(_times(kept.get("control_ms")))
                gave = True
        all_wrong = bool(trial.measurements) and all(m.status == "wrong_results" for m in trial.measurements)
        seen[i].add(RevisionState.wrong_results if all_wrong else RevisionState.ok)
        failed[i] += not gave
    for i, count in failed.items():
        if i not in seen and count >= WORKER_RETRIES:
            seen[i].add(RevisionState.unbuildable)
    precedence = (RevisionState.ok, RevisionState.wrong_results, RevisionState.unbuildable)
    return {i: Observation(state=next(s for s in precedence if s in states), values=dict(values.get(i, {})),
                           failed=failed[i], wrong=frozenset(wrong.get(i, ())), blocks=dict(blocks.get(i, {})),
                           targets=dict(targets.get(i, {})), samples=dict(calls.get(i, {})),
                           control_samples=dict(control_calls.get(i, {})), rounds=dict(rounds.get(i, {})))
            for i, states in seen.items()}


def _times(kept: Any) -> tuple[float, ...]:
    """A measurement's stored per-call times as floats (empty when none were kept)."""
    return tuple(float(t) for t in kept or () if isinstance(t, (int, float)) and t > 0)


def device_missing(trials: Sequence[Trial]) -> bool:
    """True when no trial has run and one found no CUDA device where the job asked for one: the
    worker's fault, the same at every revision, so walking inward from a failed end (as for a
    revision that does not build) would only fail every revision of the range in turn."""
    finished = [t for t in trials if t.status.finished and t.status != TrialStatus.cancelled]
    return (not any(t.status == TrialStatus.ok for t in finished)
            and any(t.status == TrialStatus.error and outcome.NO_CUDA in (t.failure_reason or "") for t in finished))


def scan_hints(session: Session, job: Job) -> tuple[int, ...]:
    """--scan auto over revisions a tracked history (any earlier job's trials) already measured:
    the indices where that history moved on one of the job's cases (`coverage.history_edges`,
    per case and fingerprint, on the job's metric). Empty for any other scan."""
    if job.spec.scan != "auto":
        return ()
    index = {sha: i for i, sha in enumerate(job.revision_shas)}
    cases = {(c["suite"], c["target"], c["name"]) for c in job.spec.cases}
    raw = job.spec.metric == "raw"
    series: dict[tuple, dict[int, float]] = defaultdict(dict)
    for row in repository.history_values(session, job.repository_id, job.revision_shas):
        value = row.value if raw else row.ratio
        if (row.suite, row.target, row.name) in cases and value:
            series[(row.name, row.fingerprint)][index[row.sha]] = value
    return tuple(sorted({i for s in series.values() for i in history_edges(s, job.spec.min_effect)}))


def config_of(job: Job, trials: Sequence[Trial], hints: tuple[int, ...] = ()) -> BisectConfig:
    spec = job.spec
    higher = True
    if spec.metric == "raw":
        higher = next((m.higher_is_better for t in trials for m in t.measurements), True)
    scan = spec.scan
    if scan is None:
        scan = AUTO_SCAN if len(job.revision_shas) > AUTO_SCAN_ABOVE else 0
    max_gap = (spec.max_gap or DEFAULT_MAX_GAP) if scan == "auto" else 0  # --scan auto: sized by max_gap
    return BisectConfig(
        min_effect=spec.min_effect, higher_is_better=higher, workers=spec.workers,
        max_trials=spec.max_trials, scan=0 if max_gap else scan, max_gap=max_gap, hints=hints,
        paired_blocks=SIDE_BY_SIDE if spec.side_by_side else 0,  # jobs from before issue 23: off
    )


def raw_medians(trials: Sequence[Trial], sha: str) -> dict[str, tuple[float, str | None]]:
    """Per case, the median of its ok raw values at `sha` and its unit (TFLOP/s, GB/s)."""
    per_case: dict[str, list[float]] = defaultdict(list)
    units: dict[str, str | None] = {}
    for trial in trials:
        if trial.revision.sha == sha and trial.status == TrialStatus.ok:
            for m in trial.measurements:
                if m.status == "ok" and m.value is not None:
                    per_case[m.case.name].append(m.value)
                    units[m.case.name] = m.unit
    return {name: (statistics.median(v), units[name]) for name, v in per_case.items()}


def _nearest_ok(observations: dict[int, Observation], start: int, step: int, n: int) -> int | None:
    i = start
    while 0 <= i < n:
        obs = observations.get(i)
        if obs is not None and obs.state == RevisionState.ok:
            return i
        i += step
    return None


TOLERANCE = re.compile(r"above tolerance ([0-9.eE+-]+)")


def wrong_effects(trials: Sequence[Trial], sha: str, cases: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per case wrong at `sha`: its largest accuracy error, the tolerance it broke (from the
    harness's message) and that message: what a correctness culprit says of each case."""
    out: dict[str, dict[str, Any]] = {}
    for trial in trials:
        if trial.revision.sha != sha or trial.status != TrialStatus.ok:
            continue
        for m in trial.measurements:
            if m.status != "wrong_results" or (cases and m.case.name not in cases):
                continue
            found = TOLERANCE.search(m.error or "")
            seen = out.get(m.case.name, {}).get("error")
            if seen is None or (m.accuracy_error is not None and m.accuracy_error > seen):
                out[m.case.name] = {"error": m.accuracy_error, "tolerance": float(found.group(1)) if found else None,
                                    "message": (m.error or "")[:300] or None}
    return out


def _write_culprits(session: Session, job: Job, plan: Plan, findings: Sequence[CorrectnessFinding],
                    trials: Sequence[Trial], observations: dict[int, Observation]) -> None:
    shas = job.revision_shas
    revisions = revisions_by_sha(session, job.repository_id, shas)
    repository.delete_culprits(session, job)
    for report in plan.culprits:
        before_i = _nearest_ok(observations, report.first - 1, -1, len(shas))
        after_i = _nearest_ok(observations, report.last, 1, len(shas))
        before = raw_medians(trials, shas[before_i]) if before_i is not None else {}
        after = raw_medians(trials, shas[after_i]) if after_i is not None else {}
        effects: dict[str, Any] = {}
        for case, effect in report.effects.items():
            effects[case] = {
                "rel": effect.rel, "ci": list(effect.ci), "before": effect.before, "after": effect.after,
                "unit": (before.get(case) or after.get(case) or (None, None))[1],
                "before_value": before.get(case, (None,))[0], "after_value": after.get(case, (None,))[0],
            }
            if effect.control_step is not None:  # judged on the target's own metric: the control moved
                effects[case]["control_step"] = effect.control_step
            if not effect.confirmed:  # shown, never counted as a step (CaseEffect.confirmed)
                effects[case]["confirmed"] = False
        first, last = shas[report.first], shas[report.last]
        session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha=first, last_sha=last,
                            revision_id=revisions[last].id if first == last else None, effects=effects))
    for finding in findings:
        first = shas[finding.first_bad]
        session.add(Culprit(job_id=job.id, kind=CulpritKind.correctness, first_sha=first, last_sha=first,
                            revision_id=revisions[first].id, effects=wrong_effects(trials, first, finding.cases),
                            fixed_sha=shas[finding.fixed_at] if finding.fixed_at is not None else None))
    session.flush()


def _progress(job: Job, trials: Sequence[Trial], observations: dict[int, Observation], plan: Plan,
              config: BisectConfig) -> dict:
    rounds = job.progress.get("rounds", 0) + (0 if plan.done else 1)
    in_blocks = sum(len(b.order()) for b in plan.blocks)
    finished = sum(t.status.finished and t.status != TrialStatus.cancelled for t in trials)
    checked = sum(t.accuracy_only and t.status.finished for t in trials)
    return {
        "revisions": len(job.revision_shas),
        "measured": len(observations),
        "unbuildable": sum(o.state == RevisionState.unbuildable for o in observations.values()),
        "trials": finished,
        "planned": sum(r.trials for r in plan.requests) + in_blocks,
        "expected_trials": (expected_trials(finished, observations, plan, config, len(job.revision_shas))
                            + in_blocks + sweep.in_flight(trials)),
        "accuracy_checked": checked,
        "rounds": rounds,
        "open_pairs": [[job.revision_shas[a][:12], job.revision_shas[b][:12]] for a, b in plan.open_pairs],
        "culprits": len(plan.culprits),
        "correctness": len(plan.correctness),
        **_build_progress(job, trials, observations, plan, config),
    }


def _build_progress(job: Job, trials: Sequence[Trial], observations: dict[int, Observation], plan: Plan,
                    config: BisectConfig) -> dict:
    """For a repository whose builds take time: the seconds its trials spent building, the build
    seconds still expected, and this round's builds (short sha, expected seconds): the progress
    line's "building 3f2a1b (est. 4m)" and an ETA that counts builds apart from trials."""
    built = [t.build_s for t in trials if t.build_s]
    if not built and not config.build_costs:
        return {}
    fallback = sum(built) / len(built) if built else 0.0
    left, now = expected_build_s(observations, plan, config.build_costs, fallback, len(job.revision_shas))
    return {"build_s_done": round(sum(built), 1), "expected_build_s": round(left, 1),
            "building": [{"sha": job.revision_shas[r][:12], "est_s": round(c, 1)} for r, c in now[:5]]}


@dataclass(frozen=True)
class Round:
    """What one planning round decided: trials to enqueue (after commit), or the job finished.
    `trial_ids` are every trial the round wrote, in the order they run; `blocks` groups those of
    them that run together, in order, on one worker (one message each; `singles` are the rest)."""

    trial_ids: list[int]
    queue: str | None = None
    finished: bool = False
    follow_up: int | None = None  # a job this round created (a bisect's attribution): advanced after commit
    children: list[int] = field(default_factory=list)  # child bisects inside dependency bumps: advanced too
    blocks: list[list[int]] = field(default_factory=list)
    countdown: int = 0  # seconds to hold the trials back: a pause for a steadier machine

    def singles(self) -> list[int]:
        """The trials sent one message each (any worker, any order)."""
        paired = {trial_id for block in self.blocks for trial_id in block}
        return [trial_id for trial_id in self.trial_ids if trial_id not in paired]


def advance(session: Session, job_id: int) -> Round:
    """One planning round for `job_id`. Raises NotFound when the job is gone; a finished job or
    a round still in flight is a no-op."""
    job = repository.get_job(session, job_id, lock=True)
    if job is None:
        raise NotFound(f"no job {job_id}")
    if job.status.finished or resolution.unresolved(job) or repository.count_in_flight(session, job.id,
                                                                                        accuracy_only=False):
        return Round([])  # (a job still resolving is advanced by its task once it is resolved)
    if job.kind == JobKind.track:  # a tracked branch's heads: measured, never bisected
        return _measure_heads(session, job)
    if job.kind in (JobKind.attribute, JobKind.localize):  # variants beside the bad end, or beside a culprit
        new, blocks, finished = (attribution.advance(session, job) if job.kind == JobKind.attribute
                                 else hunks.advance(session, job, repository.trials_of(session, job.id)))
        after = _localization_after(session, job) if finished and job.kind == JobKind.attribute else None
        return Round([t.id for t in new], queue=job.spec.device_class, finished=finished,
                     blocks=[[t.id for t in b] for b in blocks], follow_up=after.id if after is not None else None)
    every = repository.trials_of(session, job.id)
    profiled = [t for t in every if t.profile]  # a culprit's evidence (issue 43): never a timing statistic
    every = [t for t in every if not t.profile]
    every_timed = [t for t in every if not t.accuracy_only]  # the pauses count these, in the order they finished
    config = config_of(job, every, () if every else scan_hints(session, job))  # hints: the first round's scan
    config = replace(config, build_costs=job_build_costs(session, job, every))  # cost-aware probes (issue 45)
    aside = outcome.set_aside_ids(job.progress, every_timed, config)  # measured while the machine was unsteady
    trials = [t for t in every if t.id not in aside]
    timed = [t for t in trials if not t.accuracy_only]  # sweep trials never enter the timing comparison
    raw = samples_of(session, [m.id for t in timed for m in t.measurements])
    observations = observations_from(timed, job.revision_shas, job.spec.metric, raw)
    plan = plan_next(len(job.revision_shas), observations, config)
    if not plan.done and device_missing(timed):  # stop at the ends: every revision would fail alike
        plan = Plan((), done=True, correctness=plan.correctness)
    waits, pause_s = outcome.waits_of(job.progress, every_timed, config, plan)  # an unsteady machine waits (23)
    job.progress = {**_progress(job, every, observations, plan, config), "waits": outcome.waits_json(waits),
                    "set_aside": len(aside)}
    if plan.done or not (plan.requests or plan.blocks):
        if nothing_built(observations):  # the sweep's builds would fail alike: the job ends now
            repository.cancel_in_flight(session, job.id, accuracy_only=True)
        if sweep.in_flight(trials):  # the sweep's last result advances the job again
            return Round([])
        if job.spec.evidence and not profiled and plan.culprits:  # one profiled trial at each end, then conclude
            new = _profile_trials(session, job, plan, observations)
            return Round([t.id for t in new], queue=job.spec.device_class)
        findings = sweep.findings(trials, job.revision_shas) if job.spec.check_accuracy else plan.correctness
        _write_culprits(session, job, plan, findings, trials, observations)
        job.progress["correctness"] = len(findings)
        raw = samples_of(session, [m.id for t in trials for m in t.measurements])
        job.status, job.error, job.result = outcome.conclude(job.revision_shas, job.spec, trials, observations,
                                                             plan, config, raw, findings)
        job.result = outcome.with_waits(job.result, waits, config, len(aside))
        job.finished_at = utcnow()
        if job.kind == JobKind.compare:  # a PR over culprits named earlier: what it recovers, what is left
            job.result = {**job.result, "fix_check": fixcheck.check(session, job)}
        follow = attribution.maybe_create(session, job) or hunks.maybe_create(session, job)  # localized after attribution
        children = descent.maybe_descend(session, job)  # a culprit that bumps a dependency: bisected inside it
        return Round([], finished=True, follow_up=follow.id if follow is not None else None,
                     children=[child.id for child in children])
    if job.status == JobStatus.queued:
        job.status, job.started_at = JobStatus.running, utcnow()
    revisions = revisions_by_sha(session, job.repository_id, job.revision_shas)
    held = utcnow() + timedelta(seconds=pause_s)  # a paused round's trials count as sent until then
    new = [
        Trial(job_id=job.id, revision_id=revisions[job.revision_shas[revision]].id,
              device_class=job.spec.device_class, dispatched_at=held)
        for revision in plan.dispatch_order()
    ]
    blocks = _block_trials(job, every, plan.blocks, revisions, held)  # numbered after set-aside blocks too
    new += [t for block in blocks for t in block]
    new += sweep.new_trials(job, trials, plan, revisions)  # queued after the round's, run beside them
    session.add_all(new)
    session.flush()
    return Round([t.id for t in new], queue=job.spec.device_class, blocks=[[t.id for t in b] for b in blocks],
                 countdown=pause_s)


def _profile_trials(session: Session, job: Job, plan: Plan, observations: dict[int, Observation]) -> list[Trial]:
    """One profiled trial at each end of every culprit (issue 43): the nearest measured revision
    before its first commit and its last commit, each revision once. Added and flushed."""
    shas, ends = job.revision_shas, set()
    for report in plan.culprits:
        before = _nearest_ok(observations, report.first - 1, -1, len(shas))
        ends |= {report.last} | ({before} if before is not None else set())
    revisions = revisions_by_sha(session, job.repository_id, shas)
    new = [Trial(job_id=job.id, revision_id=revisions[shas[i]].id, device_class=job.spec.device_class, profile=True)
           for i in sorted(ends)]
    session.add_all(new)
    session.flush()
    return new


def _localization_after(session: Session, attribution_job: Job) -> Job | None:
    """A finished attribution's bisect, localized now when it asked for it (issue 43)."""
    parent = repository.get_job(session, attribution_job.spec.parent_job_id) if attribution_job.spec.parent_job_id else None
    return hunks.maybe_create(session, parent) if parent is not None else None


def _block_trials(job: Job, trials: Sequence[Trial], blocks: Sequence[PairBlock],
                  revisions: dict[str, Revision], held: datetime) -> list[list[Trial]]:
    """The trials of each side-by-side block, in its A B B A order, numbered after the job's
    last block (the job row is locked: no other round numbers blocks meanwhile)."""
    first = max((t.block for t in trials if t.block is not None), default=0) + 1
    return [[Trial(job_id=job.id, revision_id=revisions[job.revision_shas[revision]].id,
                   device_class=job.spec.device_class, dispatched_at=held, block=number, block_slot=slot)
             for slot, revision in enumerate(block.order())]
            for number, block in enumerate(blocks, start=first)]


def _measure_heads(session: Session, job: Job) -> Round:
    """A track job in one round: `trials_per_head` trials at every head, the heads alternating
    (a re-measure's two heads then share the machine's load); done once they are."""
    trials = repository.trials_of(session, job.id)
    if trials:
        measured = {t.revision.sha for t in trials if t.status == TrialStatus.ok}
        job.progress = {"revisions": len(job.revision_shas), "measured": len(measured),
                        "trials": sum(t.status.finished for t in trials), "rounds": 1}
        job.status, job.finished_at = JobStatus.succeeded, utcnow()
        return Round([], finished=True)
    revisions = revisions_by_sha(session, job.repository_id, job.revision_shas)
    new = [Trial(job_id=job.id, revision_id=revisions[sha].id, device_class=job.spec.device_class)
           for _ in range(job.spec.trials_per_head) for sha in job.revision_shas]
    job.status, job.started_at = JobStatus.running, utcnow()
    session.add_all(new)
    session.flush()
    return Round([t.id for t in new], queue=job.spec.device_class)


def fail(session: Session, job_id: int, message: str) -> None:
    job = repository.get_job(session, job_id, lock=True)
    if job is not None and not job.status.finished:
        job.status, job.error, job.finished_at = JobStatus.failed, message, utcnow()
