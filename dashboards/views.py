"""What each dashboard page shows, assembled from dashboards.repository (SQL) and the pure
history and chart modules. Reads only; raises service.errors.NotFound for an unknown
repository or job (rendered as a 404 by the API's domain-error handler)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from dashboards import repository
from dashboards.charts import case_chart, render_svg
from dashboards.overview import OverviewRow, overview_row
from dashboards.history import (CaseHistory, Order, RevisionPoint, assemble_histories, build_histories, index_of,
                                series_from_points)
from dashboards.repository import CaseKey, RevisionMeta
from service.errors import NotFound
from service.jobs import views as job_views
from service.jobs.schemas import JobRead
from service.models import JobStatus, Repository
from service.reports.culprits import culprit_rows
from service.trials.phases import PhaseRow, phase_table


@dataclass
class CasePanel:
    """One case: its history, the chart's SVG, and the per-revision medians table."""

    history: CaseHistory
    svg: str
    table: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RepositoryHistory:
    repository: Repository
    positions: dict[str, int]  # sha -> first-parent position of every commit the panels use
    revisions: dict[str, RevisionMeta]
    panels: list[CasePanel]
    cases: list[CaseKey]


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
    phase_rows: list[PhaseRow] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return JobStatus(self.job.status).finished


def _labels(revisions: dict[str, RevisionMeta]) -> dict[str, str]:
    return {sha: meta.label for sha, meta in revisions.items()}


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


def _panels(histories: list[CaseHistory], order: Order, revisions: dict[str, RevisionMeta]) -> list[CasePanel]:
    labels = _labels(revisions)
    return [CasePanel(history=h, svg=render_svg(case_chart(h, labels)), table=median_table(h, order, revisions))
            for h in histories]


def repository_history(session: Session, name: str, *, suite: str | None = None, target: str | None = None,
                       case: str | None = None, last: int | None = None) -> RepositoryHistory:
    """The history of every measured case of repository `name` (optionally one suite, target
    or case; optionally only the `last` commits) in first-parent order, from the stored
    per-revision medians. Raises NotFound."""
    repo = _repository(session, name)
    newest = repository.max_position(session, repo.id)
    since = newest - last + 1 if last and newest is not None else None
    points = repository.point_rows(session, repo.id, suite=suite, target=target, case=case, min_position=since)
    culprits = repository.culprit_rows(session, repo.id)
    failed = repository.failed_trials(session, repo.id)
    positions = {p.sha: p.position for p in points}
    marked = {sha for c in culprits for sha in (c.first_sha, c.last_sha)} | {f.sha for f in failed}
    positions.update(repository.revision_positions(session, repo.id, sorted(marked - positions.keys())))
    if since is not None:
        positions = {sha: p for sha, p in positions.items() if p >= since}
    histories = assemble_histories(series_from_points(points), culprits, positions, failed)
    revisions = repository.revision_meta(session, repo.id, list(positions))
    return RepositoryHistory(repository=repo, positions=positions, revisions=revisions,
                             panels=_panels(histories, positions, revisions),
                             cases=repository.measured_cases(session, repo.id))


def _repository(session: Session, name: str) -> Repository:
    repo = repository.repository_by_name(session, name)
    if repo is None:
        raise NotFound(f"no repository {name!r} is registered")
    return repo


def history_json(view: RepositoryHistory) -> dict[str, Any]:
    """The JSON body of /api/history/{name}: the commits that carry a point or a mark, and per
    case one series per fingerprint plus the culprit steps."""
    used = {p.sha for panel in view.panels for s in panel.history.series for p in s.points}
    used |= {sha for panel in view.panels for m in panel.history.steps for sha in (m.first_sha, m.last_sha)}
    used |= {f.sha for panel in view.panels for f in panel.history.failed}
    commits = []
    for sha in sorted(used, key=view.positions.__getitem__):
        meta = view.revisions.get(sha)
        commits.append({"index": view.positions[sha], "sha": sha, "subject": meta.subject if meta else None,
                        "pr_number": meta.pr_number if meta else None,
                        "authored_at": meta.authored_at.isoformat() if meta and meta.authored_at else None})
    cases = []
    for panel in view.panels:
        h = panel.history
        cases.append({
            "suite": h.suite, "target": h.target, "case": h.case, "units": h.units,
            "series": [{"fingerprint": s.fingerprint, "unit": s.unit, "higher_is_better": s.higher_is_better,
                        "points": [{"sha": p.sha, "index": p.index, "value": p.value, "control_value": p.control_value,
                                    "ratio": p.ratio, "trials": p.trials} for p in s.points]}
                       for s in h.series],
            "steps": [{"kind": m.kind, "first_sha": m.first_sha, "last_sha": m.last_sha, "exact": m.exact,
                       "rel": m.rel, "ci": list(m.ci) if m.ci else None, "job_id": m.job_id,
                       "pr_number": m.pr_number, "subject": m.subject} for m in h.steps],
            "failed": [{"sha": f.sha, "index": f.index, "statuses": list(f.statuses)} for f in h.failed],
        })
    return {"repository": view.repository.name, "commits": commits, "cases": cases}


def repository_overview(session: Session, name: str, *, sparkline_points: int = 50) -> RepositoryOverview:
    """One row per measured case of repository `name`: its latest value and ratio, a sparkline
    of its newest points and its latest step; never every point. Raises NotFound."""
    repo = _repository(session, name)
    points = repository.latest_points(session, repo.id, per_case=sparkline_points)
    culprits = repository.culprit_rows(session, repo.id)
    positions = repository.revision_positions(
        session, repo.id, sorted({sha for c in culprits for sha in (c.first_sha, c.last_sha)}))
    positions.update({p.sha: p.position for p in points})
    histories = assemble_histories(series_from_points(points), culprits, positions)
    return RepositoryOverview(repository=repo, rows=[overview_row(h) for h in histories])


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
    return JobPage(job=read, culprit_rows=culprit_rows(read), panels=_panels(histories, order, revisions),
                   trial_counts=repository.trial_counts(session, job.id),
                   phase_rows=phase_table(repository.trial_phases(session, job.id)))


def jobs_list(session: Session, *, status: JobStatus | None = None, limit: int = 50) -> list[JobRead]:
    return job_views.job_reads(session, repository.recent_jobs(session, status=status, limit=limit))
