"""Dashboard routes: HTML pages under /dashboard, the history as JSON under /api/history.
They parse the request and delegate to dashboards.views; unknown names are 404 through the
API's domain-error handler."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from perfbisect.dashboards import bounded, export, repository, triage, views
from perfbisect.dashboards.charts import format_value
from perfbisect.dashboards.payload import bounded_history_json
from perfbisect.service.api.deps import SessionDep, get_viewer
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.api.responses import BodyCache, FastJSONResponse, built_once, etag_of, etagged
from perfbisect.service.bounds import MAX_ID, NO_NUL
from perfbisect.service.errors import BadRequest
from perfbisect.service.models import AlertStatus, JobStatus
from perfbisect.service.repos.urls import public_url

# Reads: public, or a token with the read scope when PERFBISECT_PUBLIC_READS is off.
router = APIRouter(tags=["dashboard"], dependencies=[Depends(get_viewer)], responses=ERROR_RESPONSES)
# Bounded like the columns they are compared with (a NUL byte would be a database error).
RepoName = Annotated[str, PathParam(max_length=100, pattern=NO_NUL)]
Filter = Annotated[str | None, Query(max_length=300, pattern=NO_NUL)]
JobId = Annotated[int, PathParam(ge=1, le=MAX_ID)]
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.filters["num"] = lambda v: "-" if v is None else format_value(v)
templates.env.filters["svg"] = Markup  # overview.sparkline escapes every text it writes
templates.env.filters["pct"] = lambda v: "-" if v is None else f"{v * 100:+.1f}%"
# The charts' embedded specs (`tojson`) without spaces or sorting: a long history's is most of its page.
templates.env.policies["json.dumps_kwargs"] = {"separators": (",", ":")}
REGRESSION_KINDS = ("wrong results",)  # the regressions list's kind that alerts spell wrong_results
STALLED_AFTER = timedelta(minutes=30)  # a job in flight none of whose trials moved for this long


def _refresh(session, jobs: list) -> str | None:
    """Why the page should reload itself: "live" while a job in flight has had trial activity
    in the last STALLED_AFTER, "stalled" when none has, None when nothing is in flight. The
    page's script also stops after a few reloads that changed nothing (static/refresh.js)."""
    live = [j for j in jobs if not JobStatus(j.status).finished]
    if not live:
        return None
    activity = repository.last_activity(session, [j.id for j in live])
    now = datetime.now(timezone.utc)

    def utc(t: datetime) -> datetime:
        return t if t.tzinfo else t.replace(tzinfo=timezone.utc)

    latest = [max(utc(j.started_at or j.created_at), utc(activity.get(j.id, j.created_at))) for j in live]
    return "live" if any(now - t <= STALLED_AFTER for t in latest) else "stalled"


@router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
def dashboard_index(request: Request, session: SessionDep) -> HTMLResponse:
    repos = [(r, repository.measured_cases(session, r.id)) for r in repository.list_repositories(session)]
    return templates.TemplateResponse(request, "index.html", {"repos": repos, "jobs": views.jobs_list(session, limit=10)})


@router.get("/dashboard/jobs", response_class=HTMLResponse, include_in_schema=False)
def dashboard_jobs(request: Request, session: SessionDep, status: JobStatus | None = None,
                   limit: int = Query(100, ge=1, le=500)) -> HTMLResponse:
    jobs = views.jobs_list(session, status=status, limit=limit)
    return templates.TemplateResponse(request, "jobs.html", {"jobs": jobs, "status": status, "refresh": _refresh(session, jobs)})


@router.get("/dashboard/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
def dashboard_job(request: Request, session: SessionDep, job_id: JobId) -> HTMLResponse:
    page = views.job_page(session, job_id)
    return templates.TemplateResponse(request, "job.html", {"page": page, "job": page.job,
                                                            "refresh": _refresh(session, [page.job])})


@router.get("/dashboard/repositories/{name}", response_class=HTMLResponse, include_in_schema=False)
def dashboard_history(request: Request, session: SessionDep, name: RepoName, suite: Filter = None,
                      target: Filter = None, case: Filter = None,
                      last: int | None = Query(None, ge=2, le=100_000),
                      shape: Filter = None,  # shape parameters, e.g. K=512,dtype=bf16
                      overlay: bool = False) -> HTMLResponse:
    filters = {"suite": suite, "target": target, "case": case, "last": last, "shape": shape, "overlay": overlay}
    if not (suite or target or case or shape):  # every case: a summary row each, not every point
        overview = views.repository_overview(session, name)
        cases = repository.measured_cases(session, overview.repository.id)
        return templates.TemplateResponse(request, "overview.html", {"overview": overview, "cases": cases,
                                                                     "filters": filters})
    wanted = views.parse_shape(shape)  # the charts carry a bounded history; a zoom asks /api/history for more
    read = bounded.read_history(session, name, suite=suite, target=target, case=case, last=last, shape=wanted)
    view = bounded.bounded_view(session, read, bounded.CHART_POINTS, panels=True, overlay=overlay)
    alerts_of_jobs = triage.alerts_of_jobs(session, sorted({m.job_id for h in view.histories for m in h.steps}))
    download = urlencode({k: v for k, v in (("suite", suite), ("target", target), ("case", case), ("last", last)) if v})
    return templates.TemplateResponse(request, "history.html", {"view": view, "filters": filters, "shape": wanted,
                                                                "alerts_of_jobs": alerts_of_jobs, "download": download})


@router.get("/dashboard/regressions", response_class=HTMLResponse, include_in_schema=False)
def dashboard_regressions(request: Request, session: SessionDep, repository: str | None = None,
                          kind: str | None = Query(None, pattern="^(regression|improvement|wrong results)$")) -> HTMLResponse:
    """Culprits of finished jobs (what /dashboard/alerts showed before tracking's alerts)."""
    page = views.alerts_page(session, repository_name=repository, kind=kind)
    alerts_of_jobs = triage.alerts_of_jobs(session, sorted({r.job_id for r in page.rows}))
    return templates.TemplateResponse(request, "regressions.html", {"page": page, "kind": kind, "repository": repository,
                                                                    "alerts_of_jobs": alerts_of_jobs})


@router.get("/dashboard/alerts", response_class=HTMLResponse, include_in_schema=False)
def dashboard_alerts(request: Request, session: SessionDep, repository: Filter = None, branch: Filter = None,
                     status: AlertStatus | None = None, kind: str | None = None,
                     assignee: Filter = None) -> Response:
    """Tracking's alerts with their triage, filtered; triage through PATCH /api/alerts (triage.js)."""
    if kind in REGRESSION_KINDS:  # an old link to the regressions list (its kinds had spaces)
        return RedirectResponse(f"/dashboard/regressions?{request.url.query}", status_code=307)
    if kind is not None and kind not in triage.KINDS:
        raise BadRequest(f"kind must be one of {', '.join(triage.KINDS)}")
    filters = {"repository": repository, "branch": branch, "status": status.value if status else None,
               "kind": kind, "assignee": assignee}
    page = triage.alerts_page(session, filters)
    return templates.TemplateResponse(request, "alerts.html", {"page": page, "statuses": triage.STATUSES,
                                                               "kinds": triage.KINDS})


@router.get("/dashboard/alerts/{alert_id}", response_class=HTMLResponse, include_in_schema=False)
def dashboard_alert(request: Request, session: SessionDep, alert_id: JobId) -> HTMLResponse:
    page = triage.alert_page(session, alert_id)
    return templates.TemplateResponse(request, "alert.html", {"page": page, "view": page.alerts[0],
                                                              "statuses": triage.STATUSES})


@router.get("/dashboard/tracked-branches", response_class=HTMLResponse, include_in_schema=False)
def dashboard_tracked_branches(request: Request, session: SessionDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "tracked_branches.html", {"rows": triage.tracked_branches(session),
                                                                         "statuses": triage.STATUSES})


@router.get("/dashboard/repositories/{name}/compare", response_class=HTMLResponse, include_in_schema=False)
def dashboard_compare(request: Request, session: SessionDep, name: str, base: str | None = None,
                      head: str | None = None,
                      min_effect: float | None = Query(None, gt=0, lt=1, description="verdict threshold")) -> HTMLResponse:
    page = views.compare_page(session, name, base, head, min_effect)
    return templates.TemplateResponse(request, "compare.html", {"page": page})


@router.get("/api/history", tags=["history"])
def history_index(session: SessionDep) -> list[dict[str, Any]]:
    """Every repository with its measured cases (suite, target, name): what /api/history/{name} can filter on."""
    return [{"repository": r.name, "url": public_url(r.url),
             "cases": [{"suite": c.suite, "target": c.target, "case": c.name}
                       for c in repository.measured_cases(session, r.id)]}
            for r in repository.list_repositories(session)]


# The history is returned already rendered: FastAPI would otherwise validate and copy a body of
# 10,000s of points against dict[str, Any], which checks nothing.
JSON_OBJECT = {200: {"content": {"application/json": {"schema": {"type": "object"}}}}}


BOUNDED_ENCODING = "columns-1"  # in the bounded history's ETag: a new encoding is a new body
BODIES = BodyCache()  # the bounded histories and overviews built, by ETag


@router.get("/api/history/{name}", tags=["history"], responses=JSON_OBJECT)
def history(request: Request, session: SessionDep, name: RepoName, suite: Filter = None, target: Filter = None,
            case: Filter = None, last: int | None = Query(None, ge=2, le=100_000),
            start: int | None = Query(None, ge=0, le=MAX_ID, description="first commit index of the window"),
            end: int | None = Query(None, ge=0, le=MAX_ID, description="last commit index of the window"),
            width: int | None = Query(None, ge=16, le=10_000, description="at most about this many points per series"),
            ) -> Response:
    """Per case of repository `name`: one series per fingerprint (per-revision medians of the
    target metric and of the control, in first-parent commit order) and the culprit steps;
    `last` keeps only the newest N commits of that order, `start`/`end` a window of commit
    indexes. With `width`, each series is downsampled to about that many points (every step
    edge, failed build and band extreme kept) in a column encoding (dashboards.payload); each
    series says its `total` points and how many were `sent`. An ETag answers a repeated
    request with 304 when nothing changed."""
    if start is not None and end is not None and end < start:
        raise BadRequest("end must not be before start")
    if not width:
        view = views.repository_history(session, name, suite=suite, target=target, case=case, last=last,
                                        start=start, end=end)
        return etagged(request, FastJSONResponse(views.history_json(view)))
    read = bounded.read_history(session, name, suite=suite, target=target, case=case, last=last, start=start, end=end)
    tag = etag_of(f"{read.digest} {width} {BOUNDED_ENCODING}".encode())  # known before the points are read
    return built_once(request, tag, BODIES, lambda: bounded_history_json(bounded.bounded_view(session, read, width), width))


@router.get("/api/history/{name}/download", tags=["history"],
            responses={200: {"content": {t: {} for t in export.FORMATS.values()}}})
def history_download(session: SessionDep, name: RepoName, suite: Filter = None, target: Filter = None,
                     case: Filter = None, last: int | None = Query(None, ge=2, le=100_000),
                     format: str = Query("csv", pattern="^(csv|json)$")) -> Response:
    """Every point of repository `name`'s history (filtered as /api/history) as a file to
    download: CSV, one row per case, fingerprint and revision, or the /api/history JSON."""
    body = views.history_json(views.repository_history(session, name, suite=suite, target=target, case=case,
                                                       last=last))
    content = export.history_csv(body) if format == "csv" else FastJSONResponse(body).body
    filename = export.download_name(name, format, suite, target, case)
    return Response(content, media_type=export.FORMATS[format],
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


@router.get("/api/history/{name}/overview", tags=["history"], responses=JSON_OBJECT)
def history_overview(request: Request, session: SessionDep, name: str,
                     points: int = Query(50, ge=2, le=500, description="sparkline length")) -> Response:
    """Per case of repository `name`: the latest value and ratio, the newest `points` ratios and
    the latest step. What the dashboard's all-cases view shows, without every point. Its ETag is
    a digest of the newest points' versions and the culprits, known before anything is built."""
    tag = etag_of(f"overview {views.overview_digest(session, name, points)}".encode())
    return built_once(request, tag, BODIES, lambda: views.overview_json(
        views.repository_overview(session, name, sparkline_points=points)))
