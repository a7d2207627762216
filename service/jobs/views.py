"""Read models of jobs and trials, shared by the API, the CLI and the reports."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.orm import Session

from perfbisect.service.bisect.outcomes import FAILURE_WORDS
from perfbisect.service.bisect.progress import eta_seconds
from perfbisect.service.jobs import repository
from perfbisect.service.jobs.logs import HIDDEN, public_error, public_outcome
from perfbisect.service.jobs.schemas import (
    CaseEffectRead, CulpritRead, DescentRead, JobRead, JobSummary, OutcomeRead, TrialRead, WrongCaseRead,
)
from perfbisect.service.job_spec import descent_of
from perfbisect.service.models import Culprit, CulpritKind, Job, Repository, Revision
from perfbisect.service.repos.redaction import env_secrets, scrub_tree
from perfbisect.service.attribution.schemas import AttributionRead
from perfbisect.service.models import JobKind
from perfbisect.service.repos.repository import revisions_by_sha
from perfbisect.service.trials import repository as trials_repo


def job_summaries(session: Session, **filters) -> list[JobSummary]:
    return [JobSummary(url=f"/api/jobs/{row.id}", **{**row._asdict(), "kind": _value(row.kind),
                                                    "status": _value(row.status), "progress": row.progress or {}})
            for row in repository.job_summaries(session, **filters)]


def _value(enum_or_str) -> str:
    return getattr(enum_or_str, "value", enum_or_str)


def job_reads(session: Session, jobs: Sequence[Job]) -> list[JobRead]:
    """Read models of several jobs with one revision query per repository, not one per job."""
    wanted: dict[int, set[str]] = defaultdict(set)
    for job in jobs:
        wanted[job.repository_id] |= {sha for c in job.culprits for sha in (c.first_sha, c.last_sha)}
    revisions = {repo_id: revisions_by_sha(session, repo_id, list(shas)) if shas else {}
                 for repo_id, shas in wanted.items()}
    return [job_read(session, job, revisions[job.repository_id], evidence=False) for job in jobs]


def culprit_effects(culprit: Culprit, logs: bool = True) -> dict[str, Any]:
    """CulpritRead's per-case fields: timing effects of a performance culprit, the wrong cases
    (error vs tolerance) of a correctness one, with the harness's message only with `logs` (it is
    written from inside the trial, where the repository's code runs)."""
    if culprit.kind == CulpritKind.correctness:
        return {"wrong_cases": {name: WrongCaseRead(**{**e, "message": e.get("message") if logs else None})
                                for name, e in (culprit.effects or {}).items()}}
    return {"effects": {name: CaseEffectRead(**e) for name, e in (culprit.effects or {}).items()}}


def job_read(session: Session, job: Job, revisions: dict[str, Revision] | None = None, *,
             logs: bool = False, evidence: bool = True) -> JobRead:
    """The job as the API shows it; the log texts of its failures only with `logs` (its submitter
    and admins: service/jobs/logs.py), else each failure's kind and exit code. With `evidence`
    (not in lists), each culprit's 'why' lines where the job ran with evidence."""
    if revisions is None:
        shas = {c.first_sha for c in job.culprits} | {c.last_sha for c in job.culprits}
        revisions = revisions_by_sha(session, job.repository_id, list(shas)) if shas else {}
    culprits = []
    why = _evidence(session, job) if evidence else {}
    for c in job.culprits:
        rev = revisions.get(c.last_sha)
        culprits.append(CulpritRead(
            kind=c.kind.value, first_sha=c.first_sha, last_sha=c.last_sha, fixed_sha=c.fixed_sha,
            exact=c.first_sha == c.last_sha, subject=rev.subject if rev else None,
            pr_number=rev.pr_number if rev else None,
            **culprit_effects(c, logs), **why.get(c.last_sha, {}),
        ))
    secrets = env_secrets(job.repository.env)  # rows stored before values were scrubbed at the source
    stored = (job.result or {}).get("outcome")
    if stored and not logs:
        stored = public_outcome(stored)
    progress = dict(job.progress)
    if not job.status.finished:  # trials finish between planning rounds: count them live
        progress["trials"] = repository.count_finished(session, job.id)
        progress.update(live_eta(progress, job.started_at))
    return JobRead(
        id=job.id, kind=job.kind.value, status=job.status.value, repository=job.repository.name,
        spec=job.spec, progress=progress, revision_shas=job.revision_shas, error=scrub_tree(job.error, secrets),
        created_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, culprits=culprits,
        outcome=OutcomeRead.model_validate(scrub_tree(stored, secrets)) if stored else None,
        fix_check=(job.result or {}).get("fix_check") or [],
        **_attribution(session, job),
        **_descents(session, job),
    )


def live_eta(progress: dict[str, Any], started_at: datetime | None, now: datetime | None = None) -> dict[str, float]:
    """`eta_s`, the seconds a running job still expects as of `now`: its trials still expected at
    the pace of those done, and the builds it still expects at their expected cost (issue 45; the
    CLI's line and bar say the same). Nothing before a trial has finished or the planner has said
    how many to expect."""
    done, expected = int(progress.get("trials") or 0), progress.get("expected_trials")
    if started_at is None or not done or not expected:
        return {}
    if started_at.tzinfo is None:  # SQLite hands back naive UTC
        started_at = started_at.replace(tzinfo=timezone.utc)
    elapsed = max(0.0, ((now or datetime.now(timezone.utc)) - started_at).total_seconds())
    return {"eta_s": round(eta_seconds(progress, elapsed, done, max(int(expected), done)), 1)}


def _evidence(session: Session, job: Job) -> dict[str, dict]:
    """Per performance culprit (by last sha) of a finished job run with evidence: its 'why'
    lines and the evidence's URL (service/evidence)."""
    from perfbisect.service.evidence import service as evidence

    if not job.status.finished or not evidence.wants_evidence(job):
        return {}
    return {sha: {"why": found.summary, "evidence_url": f"/api/jobs/{job.id}/culprits/{sha}/evidence"}
            for sha, found in evidence.evidence_of_job(session, job.id).items()}


def _descents(session: Session, job: Job) -> dict:
    """A bisect's child bisects inside dependency bumps (with their status) and the report's chain
    lines; a child's parent."""
    from perfbisect.service.jobs import descent

    if job.kind != JobKind.bisect:
        return {}
    found = descent_of(job.spec)
    children = []
    for entry in descent.descents_of(job):
        child = repository.get_job(session, entry["job_id"]) if entry.get("job_id") else None
        children.append(DescentRead(**entry, url=f"/api/jobs/{child.id}" if child else None,
                                    status=child.status.value if child else None))
    return {"descents": children, "descent_lines": descent.lines(session, job) if children else [],
            "parent_job_id": found.parent_job_id if found else None}


def _attribution(session: Session, job: Job) -> dict:
    """An attribution job's report; a bisect's latest attribution job and its report once finished."""
    from perfbisect.service.attribution import service as attribution

    if job.kind == JobKind.attribute:
        found = attribution.result_of(job)
        return {"attribution": AttributionRead(job_id=job.id, status=job.status.value, **found) if found else None}
    if job.kind != JobKind.bisect:
        return {}
    latest = next(iter(attribution.attributions_of(session, job.id)), None)
    if latest is None:
        return {}
    found = attribution.result_of(latest)
    return {"attribution_job_id": latest.id,
            "attribution": AttributionRead(job_id=latest.id, status=latest.status.value, **found) if found else None}


def trial_reads(session: Session, job_id: int, *, with_logs: bool = True, samples: bool = False,
                after: int | None = None, limit: int | None = None) -> list[TrialRead]:
    """The job's trials in id order (keyset: those with id > `after`, at most `limit`); the raw
    samples of each measurement only when asked for (they are most of the bytes). Without
    `with_logs`, the output of the repository's code (build log, harness error, a case's
    traceback) is replaced by logs.HIDDEN where there was any, and a failed trial's by its kind
    and exit code."""

    trials = repository.trials_of(session, job_id, after=after, limit=limit)
    job = session.get(Job, job_id)
    secrets = env_secrets(session.get_one(Repository, job.repository_id).env) if trials and job else ()

    def log(text: str | None, words: str | None = None) -> str | None:
        if with_logs or text is None:
            return scrub_tree(text, secrets)
        return public_error(words, text) if words else HIDDEN

    raw = trials_repo.samples_of(session, [m.id for t in trials for m in t.measurements]) if samples else {}
    return [
        TrialRead(
            id=t.id, sha=t.revision.sha, status=t.status.value, device=t.device, fingerprint=t.fingerprint,
            failure_reason=log(t.failure_reason, FAILURE_WORDS.get(t.status.value, t.status.value)), worker_host=t.worker_host, attempts=t.attempts,
            block=t.block, block_slot=t.block_slot, profile=t.profile,
            build_s=t.build_s, build_cache=t.build_cache, run_s=t.run_s, phases=t.phases,
            samples_pruned_at=t.samples_pruned_at,
            measurements={m.case.name: {"status": m.status, "ratio": m.ratio, "value": m.value,
                                        "control_value": m.control_value, "unit": m.unit,
                                        "accuracy_error": m.accuracy_error, "error": log(m.error),
                                        **({"samples": raw.get(m.id)} if samples else {})}
                          for m in t.measurements},
        )
        for t in trials
    ]
