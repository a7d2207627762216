from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse
from sqlalchemy.orm import Session

from perfbisect import dispatch
from perfbisect.queue import ADVANCE_JOB
from perfbisect.service.api.deps import SessionDep, SubmitterDep, ViewerDep, get_viewer
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import MAX_ID
from perfbisect.service.attribution import service as attribution
from perfbisect.service.auth.principal import Principal
from perfbisect.service.jobs import logs, service, views
from perfbisect.service.jobs.schemas import BisectCreate, CompareCreate, JobAccepted, JobRead, JobSummary, TrialRead
from perfbisect.service.models import JobStatus
from perfbisect.service.reports.culprits import culprit_table
from perfbisect.service.reports.pr_comment import render_job
from perfbisect.service.settings import get_settings

router = APIRouter(prefix="/api/jobs", tags=["jobs"], responses=ERROR_RESPONSES)
READ = [Depends(get_viewer)]  # public, or a read token when PERFBISECT_PUBLIC_READS is off

JobId = Annotated[int, Path(ge=1, le=MAX_ID)]
IdempotencyKey = Annotated[str | None, Header(
    min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
    description="a client-chosen key (printable ASCII): the same key from the same token returns the same job")]
SUBMIT_RESPONSES = {200: {"model": JobAccepted, "description": "the same job as an identical open request, "
                                                               "or as an earlier request with this Idempotency-Key"}}


def _accepted(session: SessionDep, response: Response, submission: service.Submission) -> JobAccepted:
    job = submission.job
    if submission.created:
        dispatch.after_commit(session, ADVANCE_JOB, job.id)
    else:
        response.status_code = status.HTTP_200_OK
    return JobAccepted(id=job.id, status=job.status.value, revisions=len(job.revision_shas), url=f"/api/jobs/{job.id}")


@router.post("/bisect", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses=SUBMIT_RESPONSES)
def submit_bisect(session: SessionDep, submitter: SubmitterDep, response: Response, body: BisectCreate,
                  idempotency_key: IdempotencyKey = None) -> JobAccepted:
    """Bisect good..bad for every case; poll the returned URL for progress and culprits."""
    return _accepted(session, response, service.submit_bisect(session, body, submitter, idempotency_key))


@router.post("/compare", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses=SUBMIT_RESPONSES)
def submit_compare(session: SessionDep, submitter: SubmitterDep, response: Response, body: CompareCreate,
                   idempotency_key: IdempotencyKey = None) -> JobAccepted:
    """Compare a pull request's head against its base on every case."""
    return _accepted(session, response, service.submit_compare(session, body, submitter, idempotency_key))


@router.post("/{job_id}/attribute", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted,
             responses=SUBMIT_RESPONSES)
def attribute_job(session: SessionDep, submitter: SubmitterDep, response: Response, job_id: JobId) -> JobAccepted:
    """Measure the bad end of finished bisect `job_id` with each culprit reverted (alone, together,
    every subset up to three) side by side with the bad end: what each culprit costs at the head,
    and whether they interact. 422 for a job that is not a finished bisect or named no culprit."""
    return _accepted(session, response, attribution.request(session, job_id, submitter))


@router.get("", response_model=list[JobSummary], dependencies=READ)
def list_jobs(session: SessionDep, status: JobStatus | None = None,
              before: int | None = Query(None, ge=1, le=MAX_ID, description="only jobs with a smaller id (keyset paging)"),
              limit: int = Query(50, ge=1, le=500)) -> list[JobSummary]:
    """Newest first, a page at a time (pass the last id you got as `before`); read a job for its
    range, spec and culprits."""
    return views.job_summaries(session, status=status, before=before, limit=limit)


@router.get("/{job_id}", response_model=JobRead)
async def get_job(session: SessionDep, viewer: ViewerDep, job_id: JobId) -> JobRead:
    """The job; its failures' log texts only for its submitter and admins, else each failure's
    kind and exit code ("build failed: exit 7")."""
    # The API's hottest read (every client polls it): async, with its SQL in one hop to the thread
    # pool. A sync route would take a second hop, since FastAPI validates its answer in the pool.
    return await run_in_threadpool(_job_read, session, viewer, job_id)


def _job_read(session: Session, viewer: Principal | None, job_id: int) -> JobRead:
    job = service.get(session, job_id)
    return views.job_read(session, job, logs=logs.may_read(viewer, job.submitter_token_id))


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(session: SessionDep, submitter: SubmitterDep, job_id: JobId) -> JobRead:
    """Its submitter or an admin may cancel a job."""
    return views.job_read(session, service.cancel(session, job_id, submitter), logs=True)


@router.get("/{job_id}/trials", response_model=list[TrialRead])
def list_trials(session: SessionDep, viewer: ViewerDep, job_id: JobId,
                samples: bool = Query(False, description="include raw samples"),
                after: int | None = Query(None, ge=0, le=MAX_ID, description="only trials with a larger id (keyset paging)"),
                limit: int = Query(200, ge=1, le=1000)) -> list[TrialRead]:
    """The job's trials in id order, a page at a time (pass the last id you got as `after`); raw
    samples on request; build and harness logs (failure_reason, a case's error) only for the job's
    submitter and admins, since they are the repository code's output (service/jobs/logs.py)."""
    job = service.get(session, job_id)
    return views.trial_reads(session, job_id, with_logs=logs.may_read(viewer, job.submitter_token_id),
                             samples=samples, after=after, limit=limit)


# Declared by hand: with response_class=PlainTextResponse FastAPI would document the JSON error
# bodies as text/plain too.
REPORT_RESPONSES = {200: {"description": "the report", "content": {"text/plain": {"schema": {"type": "string"}}}}}


@router.get("/{job_id}/report", response_model=None, responses=REPORT_RESPONSES)
def job_report(session: SessionDep, viewer: ViewerDep, job_id: JobId,
               format: str = Query("text", pattern="^(text|markdown)$"), wide: bool = False) -> PlainTextResponse:
    """The report as text (what the CLI prints; 100 columns, or one row per case with wide) or
    Markdown (what the PR bot posts); log texts as in GET /api/jobs/{id}."""
    job = _job_read(session, viewer, job_id)
    return PlainTextResponse(culprit_table(job, wide=wide) if format == "text"
                             else render_job(job, get_settings().public_url))
