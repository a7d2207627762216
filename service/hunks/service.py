"""Hunk localization jobs (issue 43): after a bisect (and its attribution), which hunks of each
confirmed performance culprit carry its step. Flushes, never commits.

A job of kind `localize` holds one target per culprit (targets.py). Per (culprit, case) the
pure search of service/bisect/hunks.py asks for subsets of the culprit's hunks; each is
measured as attribution measures a variant (service/attribution/service.py): side by side with
the culprit in `head v v head` blocks, its gap to the culprit paired on those blocks
(service/bisect/attribution.py:case_contrasts). The variant is the culprit's parent with the
subset applied (variants.py); the culprit's own step on the case (the bisect's) turns the gap
into the subset's step, then its outcome. A subset whose hunks do not apply, build or import is
broken: recorded, never blamed. The report is job.result["hunks"] (report.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy.orm import Session

from perfbisect.service.attribution.service import VARIANT_BROKEN, culprits_of
from perfbisect.service.bisect.attribution import HEAD, Contrasts, Variant, case_contrasts, observed
from perfbisect.service.bisect.hunks import Outcome, Search, Subset, classify, plan
from perfbisect.service.bisect.model import Observation
from perfbisect.service.errors import BadRequest, NotFound
from perfbisect.service.hunks import report
from perfbisect.service.hunks.schemas import CulpritHunksRead, HunkEvidence
from perfbisect.service.hunks.targets import targets_of
from perfbisect.service.hunks.variants import arm_key, parse_arm
from perfbisect.service.job_spec import LocalizeSpec, LocalizeTarget
from perfbisect.service.models import Job, JobKind, JobStatus, Trial, TrialStatus, utcnow
from perfbisect.service.repos.repository import revisions_by_sha

Arms = dict[Variant, Observation]  # per target: HEAD the culprit, (sorted hunk indices) a variant


def maybe_create(session: Session, bisect: Job) -> Job | None:
    """The localization job of finished bisect `bisect` when its spec asked for one
    (`localize`), and it named a performance culprit."""
    if bisect.kind != JobKind.bisect or not getattr(bisect.spec, "localize", None) \
            or bisect.status == JobStatus.cancelled:
        return None
    targets = targets_of(session, bisect, culprits_of(session, bisect.id))
    if not targets:
        return None
    shared = bisect.spec.model_dump(include={"device_class", "min_effect", "metric", "policy", "max_trials"})
    spec = LocalizeSpec(good_sha=bisect.spec.bad_sha, bad_sha=bisect.spec.bad_sha, cases=bisect.spec.cases,
                        parent_job_id=bisect.id, targets=targets, **shared)
    # made once, in the round that concludes the bisect (or its attribution): a finished job's round is a no-op
    request_hash = hashlib.sha256(json.dumps({"kind": "localize", **spec.stored()}, sort_keys=True).encode()).hexdigest()
    shas = sorted({s for t in targets for s in (t.parent_sha, t.last_sha) if s and not t.skipped}) or [bisect.spec.bad_sha]
    job = Job(kind=JobKind.localize, repository_id=bisect.repository_id, spec=spec, revision_shas=shas,
              status=JobStatus.queued, progress={"targets": len(targets), "rounds": 0, "trials": 0},
              submitter_token_id=bisect.submitter_token_id, request_hash=request_hash)
    session.add(job)
    session.flush()
    return job


def arms_of(trials: Sequence[Trial], metric: str) -> tuple[dict[int, Arms], dict[tuple[int, Subset], str],
                                                           dict[tuple[int, Subset | None], int]]:
    """Per target its arms' decision values (with their blocks), the subsets that broke (and
    how), and the finished trials per arm (failed ones included)."""
    values: dict[int, dict[Variant, dict[str, list[tuple[float, int | None]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    broken: dict[tuple[int, Subset], str] = {}
    attempts: dict[tuple[int, Subset | None], int] = defaultdict(int)
    for trial in trials:
        if not trial.status.finished or trial.status == TrialStatus.cancelled or not trial.variant:
            continue
        target, subset = parse_arm(trial.variant)
        attempts[(target, subset)] += 1
        if subset is not None and trial.status in VARIANT_BROKEN:
            broken.setdefault((target, subset), report.broken_words(trial.status.value))
            continue
        arm = HEAD if subset is None else tuple(sorted(subset))
        for m in trial.measurements if trial.status == TrialStatus.ok else ():
            if subset is not None and m.status != "ok":  # a definition left out, a wrong result: never blamed
                broken.setdefault((target, subset), report.broken_words(m.status))
            value = m.ratio if metric == "ratio" else m.value
            if m.status == "ok" and value is not None and value > 0:
                values[target][arm][m.case.name].append((value, trial.block))
    arms = {t: {arm: observed({c: [v for v, _ in p] for c, p in cases.items()},
                              {c: [b for _, b in p] for c, p in cases.items()}) for arm, cases in by_arm.items()}
            for t, by_arm in values.items()}
    return arms, broken, attempts


def outcomes(target: int, case: str, full: float, contrasts: Contrasts | None, broken: dict[tuple[int, Subset], str],
             subsets: Sequence[Subset], min_effect: float) -> dict[Subset, Outcome]:
    """Each measured subset's outcome on `case`: broken, or classified from its step (the culprit's
    step plus its paired gap to the culprit); UNKNOWN without an estimate yet."""
    out: dict[Subset, Outcome] = {}
    for subset in subsets:
        if (target, subset) in broken:
            out[subset] = Outcome.broken
            continue
        arm = tuple(sorted(subset))
        if contrasts is None or arm not in contrasts.means:
            continue
        gap = contrasts.recovery(arm)
        out[subset] = classify(full + gap.log, (full + math.log1p(gap.ci[0]), full + math.log1p(gap.ci[1])), full,
                               min_effect)
    return out


def search_case(spec: LocalizeSpec, index: int, case: str, arms: Arms, broken: dict[tuple[int, Subset], str],
                attempts: dict[tuple[int, Subset | None], int]) -> tuple[Search, Contrasts | None]:
    """Where the search of (target `index`, `case`) stands. A subset still unresolved at the trial
    cap stops it: not resolved at this noise."""
    target = spec.targets[index]
    files: dict[str, list[int]] = defaultdict(list)
    for hunk in target.hunks:
        files[hunk.path].append(hunk.index)
    contrasts = case_contrasts(case, arms, 0.95) if HEAD in arms else None
    measured = [s for (t, s) in attempts if t == index and s is not None]
    results = outcomes(index, case, target.cases[case], contrasts, broken, measured, spec.min_effect)
    found = plan(files, results, complete=target.complete, budget=spec.budget)
    capped = [s for s in found.requests if attempts.get((index, s), 0) >= spec.max_trials]
    if capped:
        found = Search(reason=f"a subset was not resolved within {spec.max_trials} trials at this noise",
                       rounds=found.rounds, broken=found.broken, path=found.path)
    return found, contrasts


def advance(session: Session, job: Job, trials: Sequence[Trial]) -> tuple[list[Trial], list[list[Trial]], bool]:
    """One round of localization job `job` (locked by the caller, nothing in flight; `trials`:
    all of its trials, with their measurements): the blocks of every subset a search asks for
    (one `head v v head` block each, a round), or (True) the job concluded with its report in
    job.result["hunks"]."""
    spec: LocalizeSpec = job.spec
    arms, broken, attempts = arms_of(trials, spec.metric)
    searches = {(i, case): search_case(spec, i, case, arms.get(i, {}), broken, attempts)
                for i, target in enumerate(spec.targets) if not target.skipped for case in target.cases}
    wanted = sorted({(i, s) for (i, _), (found, _) in searches.items() for s in found.requests},
                    key=lambda item: (item[0], sorted(item[1])))
    job.progress = {"targets": len(spec.targets), "revisions": len(job.revision_shas),
                    "measured": len({t.revision_id for t in trials if t.status == TrialStatus.ok}),
                    "rounds": job.progress.get("rounds", 0) + (1 if wanted else 0),
                    "trials": sum(attempts.values()), "planned": 4 * len(wanted), "expected_trials":
                    sum(attempts.values()) + 4 * len(wanted)}
    if not wanted:
        job.result = {"hunks": report.build(spec, searches, attempts, broken)}
        job.status, job.finished_at = JobStatus.succeeded, utcnow()
        return [], [], True
    if job.status == JobStatus.queued:
        job.status, job.started_at = JobStatus.running, utcnow()
    blocks = _blocks(session, job, trials, wanted)
    new = [t for block in blocks for t in block]
    session.add_all(new)
    session.flush()
    return new, blocks, False


def _blocks(session: Session, job: Job, trials: Sequence[Trial], wanted: Sequence[tuple[int, Subset]]) -> list[list[Trial]]:
    """One block `culprit v v culprit` per wanted subset, numbered after the job's last block:
    the culprit's trials at its own commit, the variant's at its parent (the patch is applied
    there by the worker)."""
    spec: LocalizeSpec = job.spec
    revisions = revisions_by_sha(session, job.repository_id, job.revision_shas)
    first = max((t.block for t in trials if t.block is not None), default=0) + 1
    out = []
    for number, (index, subset) in enumerate(wanted, start=first):
        target: LocalizeTarget = spec.targets[index]
        head = (revisions[target.last_sha].id, arm_key(index))
        variant = (revisions[target.parent_sha].id, arm_key(index, subset))
        out.append([Trial(job_id=job.id, revision_id=revision_id, device_class=spec.device_class, variant=key,
                          dispatched_at=utcnow(), block=number, block_slot=slot)
                    for slot, (revision_id, key) in enumerate((head, variant, variant, head))])
    return out


def localizations_of(session: Session, parent_id: int) -> list[Job]:
    """The localization jobs of bisect `parent_id`, newest first."""
    from sqlalchemy import select

    from perfbisect.service.job_spec import field as spec_field

    stmt = (select(Job).where(Job.kind == JobKind.localize, spec_field(Job.spec, "parent_job_id").as_integer() == parent_id)
            .order_by(Job.id.desc()))
    return list(session.scalars(stmt))


def hunk_evidence(session: Session, job_id: int, sha: str) -> HunkEvidence:
    """The hunk evidence of culprit `sha` (its last sha, or a prefix of it or of its first) of
    bisect `job_id`, from its newest localization job. Never raises for a missing kind of
    evidence: `available` is false with the reason. Raises NotFound when there is no job
    `job_id`, BadRequest for a sha that is not hexadecimal."""
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    wanted = sha.strip().lower()
    if not wanted or any(c not in "0123456789abcdef" for c in wanted):
        raise BadRequest(f"{sha!r} is not a commit sha")
    absent = HunkEvidence(job_id=job_id, sha=wanted, available=False)
    if job.kind != JobKind.bisect:
        return absent.model_copy(update={"reason": f"job {job_id} is a {job.kind.value} job: hunks are localized for "
                                                   "a bisect's culprits"})
    found = localizations_of(session, job_id)
    if not found:
        return absent.model_copy(update={"reason": "no hunk localization ran for this bisect (--localize asks for one)"})
    localization = found[0]
    base = absent.model_copy(update={"localization_job_id": localization.id, "status": localization.status.value})
    index = next((i for i, t in enumerate(localization.spec.targets)
                  if t.last_sha.startswith(wanted) or t.first_sha.startswith(wanted)), None)
    if index is None:
        return base.model_copy(update={"reason": f"{wanted[:12]} is not a performance culprit of job {job_id} that "
                                                 "moved a case"})
    stored = ((localization.result or {}).get("hunks") or {}).get("culprits") or []
    if not localization.status.finished or index >= len(stored):
        return base.model_copy(update={"reason": f"the localization (job {localization.id}) is "
                                                 f"{localization.status.value}: no answer yet"})
    return base.model_copy(update={"available": True, "culprit": CulpritHunksRead.model_validate(stored[index])})
