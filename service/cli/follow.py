"""Submitting a bisect from the CLI and following it with a live progress bar.

Without --api the CLI talks to the configured database itself (the embedded default, or
PostgreSQL + Celery workers when DATABASE_URL/REDIS_URL are set); with --api it uses the REST API.
Both paths poll a JobRead and render the same progress and culprit table."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from service.cli.errors import CLIError  # noqa: F401  (re-exported: runs.py imports it from here)
from service.db import session_scope
from service.errors import PerfbisectError
from service.jobs import service as jobs
from service.jobs import views
from service.jobs.schemas import BisectCreate, JobRead
from service.settings import get_settings
from workers import dispatch
from workers.tasks import advance_job

FINISHED = ("succeeded", "failed", "cancelled")


def submit_local(request: BisectCreate) -> int:
    """Create the job in one transaction, then (after commit) queue its first planning round."""
    try:
        with session_scope() as session:
            job_id = jobs.create_bisect(session, request).id
    except PerfbisectError as exc:
        raise CLIError(exc.message) from exc
    dispatch.send(advance_job, job_id)
    dispatch.drain_in_background()
    return job_id


def read_local(job_id: int) -> JobRead:
    with session_scope() as session:
        return views.job_read(session, jobs.get(session, job_id))


def submit_remote(api: str, request: BisectCreate) -> int:
    response = httpx.post(f"{api}/api/jobs/bisect", json=request.model_dump(exclude_none=True), timeout=120)
    if response.status_code >= 400:
        raise CLIError(f"the API refused the job ({response.status_code}): {response.json().get('detail')}")
    return response.json()["id"]


def read_remote(api: str, job_id: int) -> JobRead:
    response = httpx.get(f"{api}/api/jobs/{job_id}", timeout=30)
    response.raise_for_status()
    return JobRead.model_validate(response.json())


def follow(read: Callable[[], JobRead], console: Console, *, show: bool = True, poll_s: float = 0.5,
           stalled: Callable[[], bool] = lambda: False) -> JobRead:
    """Poll until the job finishes, drawing revisions measured / trials / rounds / culprits."""
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"),
               TimeElapsedColumn()]
    with Progress(*columns, console=console, disable=not show, transient=False) as bar:
        task = bar.add_task("bisect", total=None, detail="planning")
        while True:
            job = read()
            p = job.progress
            detail = (f"{p.get('measured', 0)}/{p.get('revisions', '?')} revisions measured, "
                      f"{p.get('trials', 0)} trials, round {p.get('rounds', 0)}, "
                      f"{p.get('culprits', 0)} culprit(s) so far")
            bar.update(task, description=f"job {job.id} {job.status}", detail=detail,
                       total=p.get("revisions"), completed=p.get("measured", 0))
            if job.status in FINISHED:
                return job
            if stalled() and (job := read()).status not in FINISHED:
                raise CLIError(f"job {job.id} stopped making progress (see the log above); it is {job.status}")
            time.sleep(poll_s)


def embedded_stalled() -> bool:
    return get_settings().embedded and dispatch.idle()
