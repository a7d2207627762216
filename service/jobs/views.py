"""Read models of jobs and trials, shared by the API, the CLI and the reports."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.jobs import repository
from service.repos.repository import revisions_by_sha
from service.jobs.schemas import CaseEffectRead, CulpritRead, JobRead, OutcomeRead, TrialRead
from service.models import Job


def job_read(session: Session, job: Job) -> JobRead:
    shas = {c.first_sha for c in job.culprits} | {c.last_sha for c in job.culprits}
    revisions = revisions_by_sha(session, job.repository_id, list(shas))
    culprits = []
    for c in job.culprits:
        rev = revisions.get(c.last_sha)
        culprits.append(CulpritRead(
            kind=c.kind.value, first_sha=c.first_sha, last_sha=c.last_sha, fixed_sha=c.fixed_sha,
            exact=c.first_sha == c.last_sha, subject=rev.subject if rev else None,
            pr_number=rev.pr_number if rev else None,
            effects={name: CaseEffectRead(**e) for name, e in c.effects.items()},
        ))
    progress = dict(job.progress)
    if not job.status.finished:  # trials finish between planning rounds: count them live
        progress["trials"] = repository.count_finished(session, job.id)
    return JobRead(
        id=job.id, kind=job.kind.value, status=job.status.value, repository=job.repository.name,
        spec=job.spec, progress=progress, revision_shas=job.revision_shas, error=job.error, created_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, culprits=culprits,
        outcome=OutcomeRead.model_validate(job.result["outcome"]) if (job.result or {}).get("outcome") else None,
    )


def trial_reads(session: Session, job_id: int) -> list[TrialRead]:
    return [
        TrialRead(
            id=t.id, sha=t.revision.sha, status=t.status.value, device=t.device, fingerprint=t.fingerprint,
            failure_reason=t.failure_reason, worker_host=t.worker_host, attempts=t.attempts,
            build_s=t.build_s, run_s=t.run_s,
            measurements={m.case.name: {"status": m.status, "ratio": m.ratio, "value": m.value,
                                        "control_value": m.control_value, "unit": m.unit,
                                        "accuracy_error": m.accuracy_error, "error": m.error,
                                        "samples": m.samples} for m in t.measurements},
        )
        for t in repository.trials_of(session, job_id)
    ]
