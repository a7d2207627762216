"""Attribution jobs: after a bisect names culprits, measure the bad end with each culprit reverted
(alone, together, every subset up to three) beside the bad end as it is, and say what each
culprit costs at the head and whether they interact. Flushes, never commits. With
`side_by_side` (a bisect's, issue 23) each variant runs in A B B A blocks with the bad end, and
the report's estimates are paired: on each variant's within-block differences.

An attribution is a job of kind `attribute` over one revision (the bisect's bad end); its spec
names the bisect (`parent_job_id`), the culprits (first/last sha, label) and per case the
culprits whose attribution it reports. A trial measures one arm: the bad end as it is
(`variant` NULL) or a variant ('0+1': culprits 0 and 1 reverted; the worker applies it with
`git revert --no-commit`, see perfbisect/gitrepo.py). The math is service/bisect/attribution.py.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from perfbisect.service.attribution import report
from perfbisect.service.bisect.attribution import (HEAD, AttributionConfig, Variant, case_variants, observed,
                                                   parse_variant, plan_round, variant_key)
from perfbisect.service.bisect.model import Observation
from perfbisect.service.auth.principal import Principal
from perfbisect.service.errors import BadRequest, Conflict, NotFound
from perfbisect.service.jobs.service import Submission
from perfbisect.service.jobs import repository
from perfbisect.service.job_spec import AttributeSpec, RevertedCulprit
from perfbisect.service.job_spec import field as spec_field
from perfbisect.service.models import Culprit, CulpritKind, Job, JobKind, JobStatus, Trial, TrialStatus, utcnow
from perfbisect.service.repos.repository import revisions_by_sha

# A variant with one of these is out: its reverts do not apply, or the reverted code does not
# build or import. The reason is reported; it is never retried.
VARIANT_BROKEN = (TrialStatus.revert_conflict, TrialStatus.build_error, TrialStatus.import_error)
PER_ROUND = AttributionConfig().initial


def moved_cases(job: Job, culprit: Culprit) -> list[str]:
    """The cases a culprit moved, as the bisect concluded them: the steps of each case's outcome
    (the planner's DIFFERENT pairs), not every case whose effect happened to pass the threshold
    at the culprit's ends on a noisy case. Without an outcome, the reports' rule on the effects
    (a step of at least the minimum effect whose interval excludes 0)."""
    cases = ((job.result or {}).get("outcome") or {}).get("cases")
    if cases is not None:
        return [row["case"] for row in cases
                if any(step["first_sha"] == culprit.first_sha and step["last_sha"] == culprit.last_sha
                       for step in row.get("steps") or [])]
    min_effect = job.spec.min_effect
    return [case for case, e in culprit.effects.items()
            if abs(e["rel"]) >= min_effect and (e["ci"][0] > 0 or e["ci"][1] < 0)]


def attributable(job: Job, culprits: Sequence[Culprit], *, minimum: int = 2) -> tuple[list[Culprit], dict[str, list[int]]]:
    """The performance culprits to attribute and, per case, the indices (into that list) of the
    culprits that moved it: cases that at least `minimum` culprits moved (2 for the automatic
    attribution, 1 when asked for), and the culprits that moved one of those."""
    performance = [c for c in culprits if c.kind == CulpritKind.performance]
    by_case: dict[str, list[Culprit]] = defaultdict(list)
    for culprit in performance:
        for case in moved_cases(job, culprit):
            by_case[case].append(culprit)
    kept_cases = {case: found for case, found in by_case.items() if len(found) >= minimum}
    chosen = [c for c in performance if any(c in found for found in kept_cases.values())]
    index = {id(c): i for i, c in enumerate(chosen)}
    return chosen, {case: sorted(index[id(c)] for c in found) for case, found in sorted(kept_cases.items())}


def culprit_label(culprit: Culprit, revisions: dict) -> tuple[str, str]:
    """(#PR, or the sha or range when no PR is known; the commit subject)."""
    revision = revisions.get(culprit.last_sha)
    exact = culprit.first_sha == culprit.last_sha
    label = (f"#{revision.pr_number}" if revision is not None and revision.pr_number and exact
             else culprit.last_sha[:10] if exact else f"{culprit.first_sha[:10]}..{culprit.last_sha[:10]}")
    return label, revision.subject if revision is not None else ""


def create(session: Session, parent: Job, *, forced: bool, submitter_token_id: int | None = None) -> Submission | None:
    """The attribution job of finished bisect `parent` (an open identical one if any); None when
    it named fewer than two culprits on one case (one when `forced`). Raises BadRequest for a job
    that is not a finished bisect, or (forced) one without a performance culprit."""
    if parent.kind != JobKind.bisect or not parent.status.finished or parent.status == JobStatus.cancelled:
        raise BadRequest(f"job {parent.id} is not a finished bisect: only a bisect's culprits can be attributed")
    culprits, case_culprits = attributable(parent, culprits_of(session, parent.id), minimum=1 if forced else 2)
    if not case_culprits:
        if forced:
            raise BadRequest(f"job {parent.id} named no performance culprit that moved a case: nothing to attribute")
        return None
    revisions = revisions_by_sha(session, parent.repository_id, [c.last_sha for c in culprits])
    labels = [culprit_label(c, revisions) for c in culprits]
    variants = case_variants(case_culprits)
    names = set(case_culprits)
    spec = AttributeSpec.of_bisect(  # side by side as its bisect: each variant in A B B A blocks with the bad end
        parent.spec, parent_job_id=parent.id, cases=[c for c in parent.spec.cases if c["name"] in names],
        culprits=[RevertedCulprit(first_sha=c.first_sha, last_sha=c.last_sha, label=label, subject=subject)
                  for c, (label, subject) in zip(culprits, labels)],
        case_culprits=case_culprits, variants=[variant_key(v) for v in variants])
    request_hash = hashlib.sha256(json.dumps({"kind": "attribute", **spec.stored()}, sort_keys=True).encode()).hexdigest()
    existing = repository.open_job_by_request(session, request_hash)
    if existing is not None:
        return Submission(existing, created=False)
    job = Job(kind=JobKind.attribute, repository_id=parent.repository_id, spec=spec,
              revision_shas=[parent.spec.bad_sha], status=JobStatus.queued,
              progress={"revisions": 1, "measured": 0, "trials": 0, "variants": len(variants)},
              submitter_token_id=submitter_token_id or parent.submitter_token_id, request_hash=request_hash)
    session.add(job)
    session.flush()
    return Submission(job, created=True)



def maybe_create(session: Session, parent: Job) -> Job | None:
    """After a bisect finished: its attribution, unless the request said --no-attribute (or
    asked for one with --attribute, which attributes a single culprit too)."""
    if parent.kind != JobKind.bisect:
        return None
    wanted = parent.spec.attribute
    if wanted is False or parent.status == JobStatus.cancelled:
        return None
    try:
        made = create(session, parent, forced=bool(wanted))
    except BadRequest:
        return None
    return made.job if made is not None and made.created else None


def request(session: Session, parent_id: int, submitter: Principal) -> Submission:
    """POST /api/jobs/{id}/attribute: the attribution of bisect `parent_id`, whatever the number
    of culprits. Raises NotFound, BadRequest (not a finished bisect, no culprit)."""
    parent = repository.get_job(session, parent_id)
    if parent is None:
        raise NotFound(f"no job {parent_id}")
    made = create(session, parent, forced=True, submitter_token_id=submitter.token_id)
    if made is None:  # create(forced=True) raises rather than return None
        raise Conflict(f"job {parent_id} has nothing to attribute")
    return made


def arms_of(trials: Sequence[Trial], metric: str) -> tuple[dict[Variant, Observation], dict[Variant, int],
                                                           dict[Variant, str], dict[Variant, Observation]]:
    """Per arm: its decision values per case with the side-by-side block of each (an
    Observation), finished trials (failed included), the reason a variant is out (a revert
    conflict, a build or import error), and the raw metric values (with their blocks too)."""
    values: dict[Variant, dict[str, list[tuple[float, int | None]]]] = defaultdict(lambda: defaultdict(list))
    raw: dict[Variant, dict[str, list[tuple[float, int | None]]]] = defaultdict(lambda: defaultdict(list))
    attempts: dict[Variant, int] = defaultdict(int)
    broken: dict[Variant, str] = {}
    for trial in trials:
        if not trial.status.finished or trial.status == TrialStatus.cancelled:
            continue
        arm = parse_variant(trial.variant)
        attempts[arm] += 1
        if trial.status in VARIANT_BROKEN and arm != HEAD:
            broken.setdefault(arm, report.failure_words(trial.status.value, trial.failure_reason))
            continue
        for m in trial.measurements if trial.status == TrialStatus.ok else ():
            value = m.ratio if metric == "ratio" else m.value
            if m.status == "ok" and value is not None:
                values[arm][m.case.name].append((value, trial.block))
                if m.value is not None:
                    raw[arm][m.case.name].append((m.value, trial.block))
    return _observations(values), attempts, broken, _observations(raw)


def _observations(arms: dict[Variant, dict[str, list[tuple[float, int | None]]]]) -> dict[Variant, Observation]:
    return {variant: observed({case: [v for v, _ in pairs] for case, pairs in cases.items()},
                              {case: [b for _, b in pairs] for case, pairs in cases.items()})
            for variant, cases in arms.items()}


def config_of(job: Job) -> AttributionConfig:
    return AttributionConfig(min_effect=job.spec.min_effect, max_trials=job.spec.max_trials)


def advance(session: Session, job: Job) -> tuple[list[Trial], list[list[Trial]], bool]:
    """One round of attribution job `job` (locked by the caller, nothing in flight): the new
    trials, interleaved arm by arm, and those of them in side-by-side blocks (each variant with
    the bad end, `side_by_side`), or (True) the job concluded with its report in
    job.result["attribution"]."""
    trials = repository.trials_of(session, job.id)
    values, attempts, broken, raw = arms_of(trials, job.spec.metric)
    variants = [parse_variant(k) for k in job.spec.variants]
    case_culprits = {case: tuple(found) for case, found in job.spec.case_culprits.items()}
    config = config_of(job)
    plan = plan_round(case_culprits, variants, values, attempts, set(broken), config)
    head_failed = attempts.get(HEAD, 0) >= PER_ROUND and not values.get(HEAD)
    job.progress = {"revisions": 1, "measured": 1 if values.get(HEAD) else 0, "variants": len(variants),
                    "variants_out": len(broken), "rounds": job.progress.get("rounds", 0) + (0 if plan.done else 1),
                    "trials": sum(attempts.values()), "planned": sum(plan.requests.values())}
    if plan.done or head_failed:
        units = {m.case.name: (m.unit, m.higher_is_better) for t in trials for m in t.measurements}
        job.result = {"attribution": report.build(job.spec, values, raw, broken, units, config)}
        job.status = report.status_of(job.result["attribution"], head_failed)
        job.error = "the bad end gave no value in any trial" if head_failed else None
        job.finished_at = utcnow()
        return [], [], True
    if job.status == JobStatus.queued:
        job.status, job.started_at = JobStatus.running, utcnow()
    revision_id = revisions_by_sha(session, job.repository_id, job.revision_shas)[job.revision_shas[0]].id
    requests = dict(plan.requests)
    blocks = _blocks(job, trials, requests, revision_id) if job.spec.side_by_side else []
    new = [Trial(job_id=job.id, revision_id=revision_id, device_class=job.spec.device_class,
                 variant=variant_key(arm) or None, dispatched_at=utcnow())
           for arm in _interleaved(requests)]
    new += [t for block in blocks for t in block]
    job.progress = {**job.progress, "expected_trials": job.progress["trials"] + len(new)}  # the bar's total
    session.add_all(new)
    session.flush()
    return new, blocks, False


def _blocks(job: Job, trials: Sequence[Trial], requests: dict[Variant, int], revision_id: int) -> list[list[Trial]]:
    """Each variant's requested trials as blocks `head v v head` (two of the variant a block),
    taken out of `requests`; the bad end's own request is then met by the blocks' head trials.
    Numbered after the job's last block (the job row is locked)."""
    arms = [arm for arm in sorted(requests, key=lambda v: (len(v), v)) if arm != HEAD]
    counts = [-(-requests.pop(arm) // 2) for arm in arms]
    if arms:
        requests.pop(HEAD, None)
    first = max((t.block for t in trials if t.block is not None), default=0) + 1
    order = [arm for arm, count in zip(arms, counts) for _ in range(count)]
    return [[Trial(job_id=job.id, revision_id=revision_id, device_class=job.spec.device_class,
                   variant=variant_key(arm) or None, dispatched_at=utcnow(), block=number, block_slot=slot)
             for slot, arm in enumerate((HEAD, variant, variant, HEAD))]
            for number, variant in enumerate(order, start=first)]


def _interleaved(requests: dict[Variant, int]) -> list[Variant]:
    """head, v1, v2, ..., head, v1, ...: each round's trials of every arm spread through it, so a
    worker taking them in order measures the arms in turn (ABC ABC), not one after another (one
    message each: several workers may take them in any order, unlike a side-by-side block)."""
    order = sorted(requests, key=lambda v: (len(v), v))
    return [arm for i in range(max(requests.values(), default=0)) for arm in order if requests[arm] > i]


def culprits_of(session: Session, job_id: int) -> list[Culprit]:
    """The job's culprits as stored now (a bisect's are written in the round that concludes it)."""
    from sqlalchemy import select

    session.flush()
    return list(session.scalars(select(Culprit).where(Culprit.job_id == job_id).order_by(Culprit.id)))


def attributions_of(session: Session, parent_id: int) -> list[Job]:
    """The attribution jobs of bisect `parent_id`, newest first."""
    from sqlalchemy import select

    stmt = (select(Job).where(Job.kind == JobKind.attribute, spec_field(Job.spec, "parent_job_id").as_integer() == parent_id)
            .order_by(Job.id.desc()))
    return list(session.scalars(stmt))


def result_of(job: Job) -> dict[str, Any] | None:
    return (job.result or {}).get("attribution")
