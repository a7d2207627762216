from __future__ import annotations

from fastapi import APIRouter, Query, status
from fastapi.responses import PlainTextResponse

from service.api.deps import SessionDep
from service.jobs import repository, service, views
from service.jobs.schemas import BisectCreate, CompareCreate, JobAccepted, JobRead, TrialRead
from service.models import Job, JobStatus
from service.reports.culprits import culprit_table
from service.reports.pr_comment import render_job
from service.settings import get_settings
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


@router.get("", response_model=list[JobRead])
def list_jobs(session: SessionDep, status: JobStatus | None = None, limit: int = Query(50, ge=1, le=500)) -> list[JobRead]:
    return [views.job_read(session, j) for j in repository.list_jobs(session, status=status, limit=limit)]


@router.get("/{job_id}", response_model=JobRead)
def get_job(session: SessionDep, job_id: int) -> JobRead:
    return views.job_read(session, service.get(session, job_id))


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(session: SessionDep, job_id: int) -> JobRead:
    return views.job_read(session, service.cancel(session, job_id))


@router.get("/{job_id}/trials", response_model=list[TrialRead])
def list_trials(session: SessionDep, job_id: int) -> list[TrialRead]:
    service.get(session, job_id)
    return views.trial_reads(session, job_id)


@router.get("/{job_id}/report", response_class=PlainTextResponse)
def job_report(session: SessionDep, job_id: int, format: str = Query("text", pattern="^(text|markdown)$"),
               wide: bool = False) -> str:
    """The report as text (what the CLI prints; 100 columns, or one row per case with wide) or
    Markdown (what the PR bot posts)."""
    job = views.job_read(session, service.get(session, job_id))
    return culprit_table(job, wide=wide) if format == "text" else render_job(job, get_settings().public_url)
