"""What each dashboard page shows, assembled from dashboards.repository (SQL) and the pure
history and chart modules. Reads only; raises service.errors.NotFound for an unknown
repository or job (rendered as a 404 by the API's domain-error handler)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from perfbisect.dashboards import repository
from perfbisect.dashboards.alerts import AlertRow, culprit_alerts
from perfbisect.dashboards.attribution import CaseChart, attribution_charts
from perfbisect.dashboards.shapes import ShapeChart, shape_charts
from perfbisect.dashboards.charts import case_chart, commit_info, describe_device
from perfbisect.dashboards.compare import CompareRow, case_verdict, compare_rows
from perfbisect.dashboards.history import (
    CaseHistory,
    Order,
    RevisionPoint,
    assemble_histories,
    build_histories,
    index_of,
    series_from_points,
)
from perfbisect.dashboards.links import RepoLinks, repo_links
from perfbisect.dashboards.overview import OverviewRow, overview_row
from perfbisect.dashboards.repository import CaseKey, RevisionMeta
from perfbisect.service.errors import NotFound
from perfbisect.service.evidence import service as evidence
from perfbisect.service.evidence.schemas import CulpritEvidence
from perfbisect.service.jobs import views as job_views
from perfbisect.service.jobs.schemas import JobRead
from perfbisect.service.models import JobStatus, Repository
from perfbisect.service.reports.culprits import culprit_rows
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.phases import PhaseRow, build_cache_summary, phase_table


@dataclass
class CasePanel:
    """One chart: a case's history (or several shapes overlaid), the chart's data for the
    browser, and the per-revision medians table (the chart's text alternative)."""

    history: CaseHistory
    chart: dict[str, Any]
    table: list[dict[str, Any]] = field(default_factory=list)
    histories: list[CaseHistory] = field(default_factory=list)


@dataclass
class RepositoryHistory:
    repository: Repository
    positions: dict[str, int]  # sha -> first-parent position of every commit the histories use
    revisions: dict[str, RevisionMeta]
    histories: list[CaseHistory]
    panels: list[CasePanel]  # the charts and tables of the page; empty for the JSON API
    cases: list[CaseKey]
    links: RepoLinks
    devices: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, list[str]] = field(default_factory=dict)  # shape parameter -> values seen


@dataclass
class RepositoryOverview:
    repository: Repository
    rows: list[OverviewRow]


@dataclass
class JobPage:
    job: JobRead
    culprit_rows: list[list[str]]
    panels: list[CasePanel]
    trial_counts: dict[str, int]
    links: RepoLinks
    devices: dict[str, str] = field(default_factory=dict)
    phase_rows: list[PhaseRow] = field(default_factory=list)
    builds: str | None = None  # what the build cache did, in words
    attribution: list[CaseChart] = field(default_factory=list)  # per case: table, bars, sentence
    evidence: list[CulpritEvidence] = field(default_factory=list)  # per culprit of a job run with evidence (43)
    shapes: list[ShapeChart] = field(default_factory=list)  # per noisier or bimodal finding: before/after plot

    @property
    def finished(self) -> bool:
        return JobStatus(self.job.status).finished


def median_table(history: CaseHistory, order: Order, revisions: dict[str, RevisionMeta]) -> list[dict[str, Any]]:
    """One row per measured revision in commit order; per fingerprint line, its point (or None)."""
    by_sha: dict[str, list[RevisionPoint | None]] = {}
    for n, series in enumerate(history.series):
        for p in series.points:
            by_sha.setdefault(p.sha, [None] * len(history.series))[n] = p
    index = index_of(order)
    rows = []
    for sha in sorted(by_sha, key=index.__getitem__):
        meta = revisions.get(sha)
        rows.append({"sha": sha, "index": index[sha], "subject": meta.subject if meta else "",
                     "pr_number": meta.pr_number if meta else None, "points": by_sha[sha]})
    return rows


def shape_params(case_name: str) -> dict[str, str]:
    """'gemm M=512,N=512,dtype=bf16' -> {'M': '512', 'N': '512', 'dtype': 'bf16'}."""
    _, _, params = case_name.partition(" ")
    return dict(part.split("=", 1) for part in params.split(",") if "=" in part)


def shape_matches(case_name: str, wanted: dict[str, str]) -> bool:
    params = shape_params(case_name)
    return all(params.get(k) == v for k, v in wanted.items())


def parse_shape(text: str | None) -> dict[str, str]:
    """'K=64,dtype=fp32' -> {'K': '64', 'dtype': 'fp32'}; empty parts are ignored."""
    return dict(p.strip().split("=", 1) for p in (text or "").split(",") if "=" in p and p.split("=", 1)[1].strip())


def device_names(session: Session, histories: list[CaseHistory]) -> dict[str, str]:
    fingerprints = [s.fingerprint for h in histories for s in h.series if s.fingerprint]
    return {fp: describe_device(prov) for fp, prov in repository.devices_of(session, fingerprints).items()}


def chart_panels(histories: list[CaseHistory], order: Order, revisions: dict[str, RevisionMeta], links: RepoLinks,
            devices: dict[str, str], repository_name: str, overlay: bool = False) -> list[CasePanel]:
    panels = _build_panels(histories, order, revisions, links, devices, overlay)
    for panel in panels:  # the read-out links a point to the compare view with the previous one
        panel.chart["compare_url"] = f"/dashboard/repositories/{repository_name}/compare"
    return panels


def _build_panels(histories: list[CaseHistory], order: Order, revisions: dict[str, RevisionMeta], links: RepoLinks,
                  devices: dict[str, str], overlay: bool) -> list[CasePanel]:
    commits = commit_info(revisions)
    if overlay and len(histories) > 1:  # several shapes of a kernel in one chart
        groups: dict[tuple[str, str], list[CaseHistory]] = {}
        for h in histories:
            groups.setdefault((h.suite, h.target), []).append(h)
        return [CasePanel(history=hs[0], histories=hs, table=[],
                          chart=case_chart(hs, commits, devices, title=f"{len(hs)} shapes of {target}", links=links))
                for (_, target), hs in groups.items()]
    return [CasePanel(history=h, histories=[h], chart=case_chart([h], commits, devices, links=links),
                      table=median_table(h, order, revisions)) for h in histories]


def repository_history(session: Session, name: str, *, suite: str | None = None, target: str | None = None,
                       case: str | None = None, last: int | None = None, start: int | None = None,
                       end: int | None = None) -> RepositoryHistory:
    """Every point of every measured case of repository `name` (optionally one suite, target
    or case; optionally only the `last` commits, or the window of positions `start`..`end`) in
    first-parent order, from the stored per-revision medians: the unbounded /api/history (the
    page and ?width= read dashboards.bounded). Raises NotFound."""
    repo = find_repository(session, name)
    since = first_position(session, repo.id, last, start)
    series, revisions = repository.case_series(session, repo.id, suite=suite, target=target, case=case,
                                               min_position=since, max_position=end)
    culprits = repository.culprit_rows(session, repo.id)
    failed = repository.failed_trials(session, repo.id)
    positions = {p.sha: p.index for per_case in series.values() for s in per_case for p in s.points}
    marked = {sha for c in culprits for sha in (c.first_sha, c.last_sha)} | {f.sha for f in failed}
    positions.update(repository.revision_positions(session, repo.id, sorted(marked - positions.keys())))
    if since is not None or end is not None:
        low, high = since if since is not None else float("-inf"), end if end is not None else float("inf")
        positions = {sha: p for sha, p in positions.items() if low <= p <= high}
    histories = assemble_histories(series, culprits, positions, failed)
    if missing := sorted(positions.keys() - revisions.keys()):  # marks (culprits, failures) without a point
        revisions.update(repository.revision_meta(session, repo.id, missing))
    return RepositoryHistory(repository=repo, positions=positions, revisions=revisions, histories=histories,
                             panels=[], cases=[], links=repo_links(repo.url, repo.name),
                             devices=device_names(session, histories))


def first_position(session: Session, repository_id: int, last: int | None, start: int | None) -> int | None:
    """The first commit position shown: that of the `last` newest commits, not before `start`."""
    newest = repository.max_position(session, repository_id) if last else None
    since = newest - last + 1 if newest is not None else None
    if start is not None:
        since = start if since is None else max(since, start)
    return since


def natural(text: str) -> tuple:
    """Sort key: numbers by value before words."""
    return (0, float(text), "") if text.replace(".", "", 1).isdigit() else (1, 0.0, text)


def shapes_of(case_names) -> dict[str, list[str]]:
    """Shape parameter -> the values the cases `case_names` take, in natural order."""
    shapes: dict[str, set[str]] = {}
    for case_name in case_names:
        for k, v in shape_params(case_name).items():
            shapes.setdefault(k, set()).add(v)
    return {k: sorted(v, key=natural) for k, v in shapes.items()}


def find_repository(session: Session, name: str) -> Repository:
    repo = repository.repository_by_name(session, name)
    if repo is None:
        raise NotFound(f"no repository {name!r} is registered")
    return repo


def history_json(view: RepositoryHistory) -> dict[str, Any]:
    """The JSON body of /api/history/{name}: the commits that carry a point or a mark, and per
    case one series per fingerprint plus the culprit steps."""
    used = {p.sha for h in view.histories for s in h.series for p in s.points}
    used |= {sha for h in view.histories for m in h.steps for sha in (m.first_sha, m.last_sha)}
    used |= {f.sha for h in view.histories for f in h.failed}
    commits = []
    for sha in sorted(used, key=view.positions.__getitem__):
        meta = view.revisions.get(sha)
        commits.append({"index": view.positions[sha], "sha": sha, "subject": meta.subject if meta else None,
                        "pr_number": meta.pr_number if meta else None,
                        "authored_at": meta.authored_at.isoformat() if meta and meta.authored_at else None})
    cases = []
    for h in view.histories:
        cases.append({
            "suite": h.suite, "target": h.target, "case": h.case, "units": h.units,
            "series": [{"fingerprint": s.fingerprint, "unit": s.unit, "higher_is_better": s.higher_is_better,
                        "device": view.devices.get(s.fingerprint or ""),
                        # sha, index, value, control_value, ratio, trials, value/ratio min and max
                        "total": len(s.points), "sent": len(s.points),
                        "points": [dict(zip(RevisionPoint._fields, p)) for p in s.points]}
                       for s in h.series],
            "steps": [{"kind": m.kind, "first_sha": m.first_sha, "last_sha": m.last_sha, "exact": m.exact,
                       "rel": m.rel, "ci": list(m.ci) if m.ci else None, "job_id": m.job_id,
                       "pr_number": m.pr_number, "subject": m.subject, "fixed_sha": m.fixed_sha} for m in h.steps],
            "failed": [{"sha": f.sha, "index": f.index, "statuses": list(f.statuses)} for f in h.failed],
        })
    return {"repository": view.repository.name, "commits": commits, "cases": cases}


def repository_overview(session: Session, name: str, *, sparkline_points: int = 50) -> RepositoryOverview:
    """One row per measured case of repository `name`: its latest value and ratio, a sparkline
    of its newest points and its latest step; never every point. Raises NotFound."""
    repo = find_repository(session, name)
    points = repository.latest_points(session, repo.id, per_case=sparkline_points)
    culprits = repository.culprit_rows(session, repo.id)
    positions = repository.revision_positions(
        session, repo.id, sorted({sha for c in culprits for sha in (c.first_sha, c.last_sha)}))
    positions.update({p.sha: p.position for p in points})
    histories = assemble_histories(series_from_points(points), culprits, positions)
    return RepositoryOverview(repository=repo, rows=[overview_row(h) for h in histories])


def overview_digest(session: Session, name: str, per_case: int) -> str:
    """Changes whenever repository_overview(name, per_case)'s body would: the newest points (their
    versions, repository.latest_digest: on PostgreSQL no point is read) and the marks
    (repository.marks_digest). Raises NotFound."""
    repo = find_repository(session, name)
    return hashlib.blake2b(repr((repo.id, repo.name, repository.latest_digest(session, repo.id, per_case),
                                 repository.marks_digest(session, repo.id))).encode(), digest_size=16).hexdigest()


def overview_json(overview: RepositoryOverview) -> dict[str, Any]:
    def step(m) -> dict[str, Any] | None:
        return None if m is None else {"kind": m.kind, "first_sha": m.first_sha, "last_sha": m.last_sha,
                                       "rel": m.rel, "ci": list(m.ci) if m.ci else None, "job_id": m.job_id,
                                       "pr_number": m.pr_number}

    return {"repository": overview.repository.name,
            "cases": [{"suite": r.suite, "target": r.target, "case": r.case, "unit": r.unit,
                       "latest_sha": r.latest_sha, "latest_value": r.latest_value, "latest_ratio": r.latest_ratio,
                       "points": r.points, "latest_step": step(r.latest_step)} for r in overview.rows]}


def job_page(session: Session, job_id: int) -> JobPage:
    """The job read model (status, progress, culprits), the culprit table rows of the text and
    Markdown reports, and per case the chart and per-revision medians of this job's trials over
    its own range. Raises NotFound."""
    job = repository.job_with_culprits(session, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    read = job_views.job_read(session, job)
    order = list(job.revision_shas)
    revisions = repository.revision_meta(session, job.repository_id, order)
    rows = repository.measurement_rows(session, job.repository_id, job_id=job.id)
    histories = build_histories(rows, repository.culprit_rows(session, job.repository_id, job_id=job.id), order,
                                repository.failed_trials(session, job.repository_id, job_id=job.id))
    links, devices = repo_links(job.repository.url, job.repository.name), device_names(session, histories)
    return JobPage(job=read, culprit_rows=culprit_rows(read), panels=chart_panels(histories, order, revisions, links, devices,
                                                                          job.repository.name),
                   trial_counts=repository.trial_counts(session, job.id), links=links, devices=devices,
                   phase_rows=phase_table(repository.trial_phases(session, job.id)),
                   builds=build_cache_summary(repository.trial_builds(session, job.id)),
                   attribution=attribution_charts(read.attribution), shapes=shape_charts(read.outcome),
                   evidence=list(evidence.evidence_of_job(session, job.id).values()) if job.status.finished else [])


def jobs_list(session: Session, *, status: JobStatus | None = None, limit: int = 50) -> list[JobRead]:
    return job_views.job_reads(session, repository.recent_jobs(session, status=status, limit=limit))


@dataclass
class AlertsPage:
    rows: list[AlertRow]
    source: str  # where the rows come from, said on the page


def alerts_page(session: Session, *, repository_name: str | None = None, kind: str | None = None,
                limit: int = 200) -> AlertsPage:
    """The regressions list. The seam for tracking's alerts: today the rows are the passed
    steps of culprits of finished jobs; alerts with a triage state will be read here instead."""
    repo_id = find_repository(session, repository_name).id if repository_name else None
    loaded = repository.finished_culprits(session, repository_id=repo_id, limit=limit)
    shas: dict[int, set[str]] = {}
    for culprit, _job, repo in loaded:
        shas.setdefault(repo.id, set()).add(culprit.last_sha)
    metas = {rid: repository.revision_meta(session, rid, sorted(found)) for rid, found in shas.items()}
    rows = [row for culprit, job, repo in loaded
            for row in culprit_alerts(culprit, job, repo, metas[repo.id].get(culprit.last_sha),
                                      repo_links(repo.url, repo.name))]
    if kind:
        rows = [r for r in rows if r.kind == kind]
    return AlertsPage(rows=rows, source="culprits of finished jobs")


@dataclass
class ComparePage:
    repository: Repository
    base: RevisionMeta | None
    head: RevisionMeta | None
    rows: list[CompareRow]
    choices: list[RevisionMeta]
    links: RepoLinks
    min_effect: float  # the newest job's at the head, else the repository's newest job's, else the default
    devices: dict[str, str] = field(default_factory=dict)


def _with_verdicts(session: Session, repo_id: int, rows: list[CompareRow], base: str, head: str,
                   min_effect: float) -> list[CompareRow]:
    """Each row with the three-way verdict from the two revisions' trials (ratio or value as the
    row compares)."""
    values: dict[tuple, dict[str, list[float]]] = {}
    for m in repository.measurement_rows(session, repo_id, shas=[base, head]):
        if m.status != "ok":
            continue
        sides = values.setdefault((m.suite, m.target, m.case, m.fingerprint or ""), {"ratio": {}, "value": {}})
        for metric in ("ratio", "value"):
            if getattr(m, metric) is not None:
                sides[metric].setdefault(m.sha, []).append(getattr(m, metric))
    out = []
    for r in rows:
        per_sha = values.get((r.suite, r.target, r.case, r.fingerprint or ""), {}).get(r.metric, {})
        found = case_verdict(per_sha.get(base, []), per_sha.get(head, []), min_effect)
        out.append(replace(r, verdict=found))
    return out


def compare_page(session: Session, name: str, base: str | None, head: str | None,
                 min_effect: float | None = None) -> ComparePage:
    """Two stored revisions of repository `name` (sha or a unique prefix) compared from their
    per-revision medians, with each case's verdict at `min_effect` (default: that of the newest
    job that measured the head, else of the repository's newest job, which the form shows).
    A head alone (a commit link) is compared with the measured revision before it; without a
    head, only the revisions to choose from. Raises NotFound for an unknown repository or a
    ref that names no single stored revision."""
    repo = find_repository(session, name)
    revs = []
    for ref in (base, head):
        if not ref:
            revs.append(None)
            continue
        rev = repository.revision_by_ref(session, repo.id, ref.strip())
        if rev is None:
            raise NotFound(f"no single stored revision of {name!r} starts with {ref!r}")
        revs.append(rev)
    if revs[1] and not revs[0]:  # one commit (a local repository's commit link): against the one before it
        revs[0] = repository.measured_before(session, repo.id, revs[1])
    if min_effect is None:
        min_effect = ((revs[1] and repository.job_min_effect(session, revs[1].id))
                      or repository.newest_min_effect(session, repo.id) or get_settings().default_min_effect)
    rows: list[CompareRow] = []
    if revs[0] and revs[1]:
        points = repository.revision_points(session, repo.id, [revs[0].id, revs[1].id])
        rows = compare_rows([p for rid, p in points if rid == revs[0].id], [p for rid, p in points if rid == revs[1].id])
        rows = _with_verdicts(session, repo.id, rows, revs[0].sha, revs[1].sha, min_effect)
    meta = repository.revision_meta(session, repo.id, [r.sha for r in revs if r])
    fps = [r.fingerprint for r in rows if r.fingerprint]
    devices = {fp: describe_device(p) for fp, p in repository.devices_of(session, fps).items()}
    choices = [RevisionMeta(r.sha, r.subject or "", r.pr_number, r.authored_at)
               for r in repository.measured_revisions(session, repo.id)]
    return ComparePage(repository=repo, base=meta.get(revs[0].sha) if revs[0] else None,
                       head=meta.get(revs[1].sha) if revs[1] else None, rows=rows, choices=choices,
                       links=repo_links(repo.url, repo.name), devices=devices,
                       min_effect=min_effect)
