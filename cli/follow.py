"""Submitting a bisect from the CLI and following it with a live progress bar.

Without --api the CLI talks to the configured database itself (the embedded default, or
PostgreSQL + Celery workers when DATABASE_URL/REDIS_URL are set), as its local admin token
(cli.tokens); with --api it uses the REST API with PERFBISECT_TOKEN. Both paths poll a
JobRead and render the same progress and culprit table."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from perfbisect import dispatch
from perfbisect.cli.common import CLIError
from perfbisect.cli.tokens import api_token, local_principal
from perfbisect.queue import ADVANCE_JOB
from perfbisect.service.attribution import service as attribution
from perfbisect.service.bisect.progress import eta_seconds
from perfbisect.service.db import session_scope
from perfbisect.service.errors import PerfbisectError
from perfbisect.service.jobs import advance, views
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate, CompareCreate, JobRead
from perfbisect.service.settings import get_settings

FINISHED = ("succeeded", "inconclusive", "failed", "cancelled")


def submit_local(request: BisectCreate | CompareCreate) -> int:
    """Create the job in one transaction, then (after commit) queue its first planning round.
    Embedded, an identical open job can only be one left by a CLI process that ended (tasks run
    in the process that submitted them): it is cancelled and replaced."""
    principal = local_principal()
    submit = jobs.submit_compare if isinstance(request, CompareCreate) else jobs.submit_bisect
    try:
        with session_scope() as session:
            submission = submit(session, request, principal)
            if not submission.created and get_settings().embedded:
                jobs.cancel(session, submission.job.id, principal)
                session.flush()
                submission = submit(session, request, principal)
            job_id = submission.job.id
    except PerfbisectError as exc:
        raise CLIError(exc.message) from exc
    if submission.created:
        try:
            dispatch.send(ADVANCE_JOB, job_id)
        except Exception as exc:  # kombu/redis connection errors: the job can never start
            with session_scope() as session:
                advance.fail(session, job_id, f"could not queue the job: {exc}")
            raise CLIError(f"cannot reach the broker at {get_settings().redis_url}: {exc}") from exc
        dispatch.drain_in_background()
    return job_id


def cancel_local(job_id: int, wait_s: float = 600) -> JobRead:
    """Cancel an embedded job (Ctrl-C): pending trials are dropped; a running one finishes and is
    ignored. Waits for the in-process queue to empty, so no task is cut off at interpreter exit."""
    try:
        with session_scope() as session:
            jobs.cancel(session, job_id, local_principal())
    except PerfbisectError:  # it finished meanwhile
        pass
    dispatch.settle(wait_s)
    return read_local(job_id)


def read_local(job_id: int) -> JobRead:
    """The job as its local admin sees it: with its failures' logs."""
    with session_scope() as session:
        return views.job_read(session, jobs.get(session, job_id), logs=True)


def _auth_headers() -> dict[str, str]:
    token = api_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def call(method: str, url: str, **kw) -> httpx.Response:
    """One request to the API with the CLI's token; an unreachable server or an error answer
    is a CLIError."""
    try:
        response = httpx.request(method, url, headers=_auth_headers(), **kw)
    except httpx.HTTPError as exc:
        raise CLIError(f"cannot reach the API at {url}: {exc}") from exc
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text[:200]
        raise CLIError(f"the API answered {response.status_code} to {method} {url}: {detail}")
    return response


def submit_remote(api: str, request: BisectCreate | CompareCreate) -> int:
    kind = "compare" if isinstance(request, CompareCreate) else "bisect"
    return call("POST", f"{api}/api/jobs/{kind}", json=request.model_dump(exclude_none=True, exclude_unset=True),
                timeout=120).json()["id"]


def attribute_remote(api: str, job_id: int) -> int:
    return call("POST", f"{api}/api/jobs/{job_id}/attribute", timeout=60).json()["id"]


def attribute_local(job_id: int) -> int:
    """The attribution job of bisect `job_id` (created, or the open one), queued after commit."""
    try:
        with session_scope() as session:
            made = attribution.request(session, job_id, local_principal())
            attribution_id, created = made.job.id, made.created
    except PerfbisectError as exc:
        raise CLIError(exc.message) from exc
    if created:
        dispatch.send(ADVANCE_JOB, attribution_id)
        dispatch.drain_in_background()
    return attribution_id


def read_remote(api: str, job_id: int) -> JobRead:
    return JobRead.model_validate(call("GET", f"{api}/api/jobs/{job_id}", timeout=30).json())


def cancel_remote(api: str, job_id: int) -> JobRead:
    return JobRead.model_validate(call("POST", f"{api}/api/jobs/{job_id}/cancel", timeout=30).json())


def bar_position(job: JobRead) -> tuple[int, int | None]:
    """(trials done, trials expected): the bar counts planned work, and is full once finished."""
    p = job.progress
    done = p.get("trials", 0)
    if job.status in FINISHED:
        return done, max(done, 1)
    expected = p.get("expected_trials")
    return done, None if expected is None else max(expected, done)


class MonotoneBar:
    """What the bar shows across polls: the planner re-estimates the work every round, so its
    expected total can fall and rise again, which drew a bar that went backwards each round.
    Here the done count never shrinks and the total only grows (until the job ends: then it is
    what was done, and the bar is full)."""

    def __init__(self) -> None:
        self.done = 0
        self.total: int | None = None

    def update(self, job: JobRead) -> tuple[int, int | None]:
        done, expected = bar_position(job)
        self.done = max(self.done, done)
        if job.status in FINISHED:
            self.total = max(self.done, 1)
        elif expected is not None:
            self.total = max(self.total or 0, expected, self.done)
        return self.done, self.total


def progress_line(job: JobRead, elapsed_s: float, position: tuple[int, int | None] | None = None) -> str:
    """One line of where a job stands, for a log (a CI job, nohup): revisions, trials, culprits
    so far and an ETA from the pace so far when the planner has said how many trials to expect.
    `position` is the (done, expected) a MonotoneBar keeps across the lines."""
    p = job.progress
    done, expected = position or bar_position(job)
    eta = ""
    if expected and done and job.status not in FINISHED:
        eta = f", ETA {_minutes(eta_s(p, elapsed_s, done, expected))}"
    return (f"job {job.id} {job.status}: round {p.get('rounds', 0)}{building_phase(job)}, {done}/{expected or '?'} "
            f"trials, {p.get('measured', 0)}/{p.get('revisions', '?')} revisions, {p.get('culprits', 0)} culprit(s), "
            f"{_minutes(elapsed_s)} elapsed{eta}")


def eta_s(progress: dict, elapsed_s: float, done: int, expected: int) -> float:
    """Seconds left, builds still expected included (service/bisect/progress.py)."""
    return eta_seconds(progress, elapsed_s, done, expected)


def building_phase(job: JobRead) -> str:
    """`, building 3f2a1b (est. 4m)`: the round's first revision still to build (and how many
    more), while the job runs; "" where it builds nothing."""
    builds = job.progress.get("building") or []
    if job.status in FINISHED or not builds:
        return ""
    first = builds[0]
    more = f" +{len(builds) - 1}" if len(builds) > 1 else ""
    est_s = float(first.get("est_s") or 0)
    estimate = f" (est. {_rough(est_s)})" if est_s >= 1 else ""  # no "(est. 0s)" for a build that costs nothing
    return f", building {str(first.get('sha', ''))[:6]}{estimate}{more}"


def _rough(seconds: float) -> str:
    """4m, 40s: an estimate's precision."""
    return f"{round(seconds / 60)}m" if seconds >= 90 else f"{round(seconds)}s"


def _minutes(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s"


def follow(read: Callable[[], JobRead], console: Console, *, show: bool = True, poll_s: float = 0.5,
           stalled: Callable[[], bool] = lambda: False) -> JobRead:
    """Poll until the job finishes, drawing trials done of those expected, an ETA, revisions
    measured, rounds and culprits: a live bar on a terminal; elsewhere (a log) one line per
    round and one at the end, since a bar redrawn in place prints nothing there until it ends.
    Raises CLIError when an embedded job stops making progress."""
    if show and not console.is_terminal:
        return _follow_lines(read, console, poll_s, stalled)
    started = time.monotonic()
    with Progress(*bar_columns(), console=console, disable=not show, transient=False) as bar:
        task = bar.add_task("bisect", total=None, detail="planning", eta=bar_eta(None, 0.0, 0, None))
        shown = MonotoneBar()
        while True:
            job = read()
            done, expected = shown.update(job)
            bar.update(task, description=f"job {job.id} {job.status}", detail=bar_detail(job, done, expected),
                       total=expected, completed=done, eta=bar_eta(job, time.monotonic() - started, done, expected))
            if job.status in FINISHED:
                return job
            _check_stalled(read, stalled)
            time.sleep(poll_s)


def bar_columns() -> list:
    """The live bar's columns, sized so that elapsed and ETA still show in 100 columns: a
    20-column bar, and the elapsed/ETA before the free-text detail, which is what a narrow
    terminal cuts."""
    return [TextColumn("[bold]{task.description}"), BarColumn(bar_width=20), TaskProgressColumn(),
            TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"), TextColumn("{task.fields[detail]}")]


def bar_eta(job: JobRead | None, elapsed_s: float, done: int, expected: int | None) -> str:
    """The bar's ETA, H:MM:SS as rich draws times: the same estimate as the log line's, which
    counts the builds still expected (rich's own column would count trials only); -:--:-- until
    the planner has said how many trials to expect, 0:00:00 once the job is finished."""
    if job is not None and job.status in FINISHED:
        return "0:00:00"
    if job is None or not expected or not done:
        return "-:--:--"
    whole = int(eta_seconds(job.progress, elapsed_s, done, expected))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def bar_detail(job: JobRead, done: int, expected: int | None) -> str:
    p = job.progress
    return (f"{done}/{expected or '?'} trials, {p.get('measured', 0)}/{p.get('revisions', '?')} revs, "
            f"round {p.get('rounds', 0)}{building_phase(job)}, {p.get('culprits', 0)} culprit(s)")


def _follow_lines(read: Callable[[], JobRead], console: Console, poll_s: float,
                  stalled: Callable[[], bool]) -> JobRead:
    started = time.monotonic()
    last = None
    shown = MonotoneBar()
    while True:
        job = read()
        position = shown.update(job)
        state = (job.status, job.progress.get("rounds", 0))
        if state != last:
            console.print(progress_line(job, time.monotonic() - started, position), soft_wrap=True, highlight=False)
            last = state
        if job.status in FINISHED:
            return job
        _check_stalled(read, stalled)
        time.sleep(poll_s)


def _check_stalled(read: Callable[[], JobRead], stalled: Callable[[], bool]) -> None:
    if stalled() and (job := read()).status not in FINISHED:
        raise CLIError(f"job {job.id} stopped making progress (see the log above); it is {job.status}")


def embedded_stalled() -> bool:
    return get_settings().embedded and dispatch.idle()
