from __future__ import annotations

from fastapi import APIRouter, Query, status
from fastapi.responses import PlainTextResponse

from service.api.deps import SessionDep
from service.jobs import repository, service, views
from service.jobs.schemas import BisectCreate, CompareCreate, JobAccepted, JobRead, JobSummary, TrialRead
from service.models import Job, JobStatus
from service.reports.culprits import culprit_table, markdown_report
from workers import dispatch
from workers.tasks import advance_job

router = APIRouter(prefix="/api/jobs", tags=["jobs"])


def _accepted(session: SessionDep, job: Job) -> JobAccepted:
    dispatch.after_commit(session, advance_job, job.id)
    return JobAccepted(id=job.id, status=job.status.value, revisions=len(job.revision_shas), url=f"/api/jobs/{job.id}")


@router.post("/bisect", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted)
def submit_bisect(session: SessionDep, body: BisectCreate) -> JobAccepted:
    """Bisect good..bad for every case; poll the returned URL for progress and culprits."""
    return _accepted(session, service.create_bisect(session, body))


@router.post("/compare", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted)
def submit_compare(session: SessionDep, body: CompareCreate) -> JobAccepted:
    """Compare a pull request's head against its base on every case."""
    return _accepted(session, service.create_compare(session, body))


@router.get("", response_model=list[JobSummary])
def list_jobs(session: SessionDep, status: JobStatus | None = None,
              before: int | None = Query(None, ge=1, description="only jobs with a smaller id (keyset paging)"),
              limit: int = Query(50, ge=1, le=500)) -> list[JobSummary]:
    """Newest first, a page at a time (pass the last id you got as `before`); read a job for its
    range, spec and culprits."""
    return views.job_summaries(session, status=status, before=before, limit=limit)


@router.get("/{job_id}", response_model=JobRead)
def get_job(session: SessionDep, job_id: int) -> JobRead:
    return views.job_read(session, service.get(session, job_id))


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(session: SessionDep, job_id: int) -> JobRead:
    return views.job_read(session, service.cancel(session, job_id))


@router.get("/{job_id}/trials", response_model=list[TrialRead])
def list_trials(session: SessionDep, job_id: int, samples: bool = Query(False, description="include raw samples"),
                after: int | None = Query(None, ge=0, description="only trials with a larger id (keyset paging)"),
                limit: int = Query(200, ge=1, le=1000)) -> list[TrialRead]:
    """The job's trials in id order, a page at a time: pass the last id you got as `after`."""
    service.get(session, job_id)
    return views.trial_reads(session, job_id, samples=samples, after=after, limit=limit)


@router.get("/{job_id}/report", response_class=PlainTextResponse)
def job_report(session: SessionDep, job_id: int, format: str = Query("text", pattern="^(text|markdown)$")) -> str:
    """The culprit table as text (what the CLI prints) or Markdown (what the PR bot posts)."""
    job = views.job_read(session, service.get(session, job_id))
    return culprit_table(job) if format == "text" else markdown_report(job)
