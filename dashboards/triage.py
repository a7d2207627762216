"""The alerts pages (tracking's alerts with their triage) and the tracked-branches page: read
models assembled from service.alerts and service.tracking. Reads only; the triage itself goes
through PATCH /api/alerts from the page's script (static/triage.js) with the person's token.
Raises service.errors.NotFound for an unknown alert."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from perfbisect.dashboards.links import RepoLinks, repo_links
from perfbisect.service.alerts import one_commit
from perfbisect.service.alerts import repository as alerts_repository
from perfbisect.service.alerts import service as alerts_service
from perfbisect.service.alerts.render import METRIC_SHORT, error_text, evidence_page, measured_text, why_line
from perfbisect.service.alerts.schemas import AlertChangeRead, AlertRead
from perfbisect.service.alerts.views import alert_reads
from perfbisect.service.evidence import service as evidence
from perfbisect.service.models import Alert, AlertKind, AlertStatus, TrackedBranch, TrackTrigger
from perfbisect.service.tracking import repository as tracking_repository

STATUSES = [s.value for s in AlertStatus]
KINDS = [k.value for k in AlertKind]


@dataclass
class AlertView:
    """One alert with the links the pages need: its chart, its bisect, its culprit commit."""

    alert: AlertRead
    links: RepoLinks
    chart_url: str | None
    target: str | None = None

    @property
    def bug_url(self) -> str | None:
        bug = self.alert.bug or ""
        return bug if bug.startswith(("https://", "http://")) else None


@dataclass
class AlertsPage:
    alerts: list[AlertView]
    filters: dict[str, str | None]
    tracked: list[TrackedBranch]
    changes: list[AlertChangeRead] = field(default_factory=list)
    metric: str = "ratio to the control"  # what the cases' before and after are
    measured: dict[str, str] = field(default_factory=dict)  # case -> value with its unit, or error vs tolerance
    why: str | None = None  # the culprit's evidence in one line (issue 43), and its page
    why_url: str | None = None


def chart_url(repository: str, case: str | None, target: str | None) -> str | None:
    """The history page of the alert's first case (None when it has no case)."""
    if not case:
        return None
    query = {"case": case, **({"target": target} if target else {})}
    return f"/dashboard/repositories/{repository}?{urlencode(query)}"


def _views(session: Session, reads: list[AlertRead], targets: dict[int, str]) -> list[AlertView]:
    urls = {t.id: t.repository.url for t in tracking_repository.list_all(session)}
    out = []
    for read in reads:
        case = read.cases[0].case if read.cases else None
        out.append(AlertView(alert=read, links=repo_links(urls.get(read.tracked_branch_id, "")),
                             chart_url=chart_url(read.repository, case, targets.get(read.id)),
                             target=targets.get(read.id)))
    return out


def alerts_page(session: Session, filters: dict[str, str | None], limit: int = 300) -> AlertsPage:
    """Tracking's alerts newest first, narrowed by the filters (repository, branch, status,
    kind, assignee); each with who triaged it and when, its assignee and issue link."""
    status = AlertStatus(filters["status"]) if filters.get("status") else None
    kind = AlertKind(filters["kind"]) if filters.get("kind") else None
    loaded = alerts_repository.listing(session, status=status, kind=kind, repository=filters.get("repository"),
                                       branch=filters.get("branch"), assignee=filters.get("assignee"), limit=limit)
    targets = {a.id: a.cases[0].case.target for a in loaded if a.cases}
    return AlertsPage(alerts=_views(session, alert_reads(session, loaded), targets), filters=filters,
                      tracked=list(tracking_repository.list_all(session)))


def _measured(session: Session, tracked: TrackedBranch, alert: Alert) -> dict[str, str]:
    """Per case, the measured value before → after with its unit, or a wrong case's error against
    the tolerance: the culprit's stored effects, else the medians at the alert's two heads."""
    culprit = alerts_repository.bisect_culprit(session, alert)
    effects = (culprit.effects if culprit is not None else None) or one_commit.measured(session, tracked, alert)
    out = {}
    for c in alert.cases:
        effect = effects.get(c.case.name)
        text = error_text(effect) if c.rel is None else (measured_text(effect) if effect else None)
        out[c.case.name] = text or "–"
    return out


def alert_page(session: Session, alert_id: int) -> AlertsPage:
    """One alert with its cases (before → after with units, or the error against the tolerance),
    links and triage history. Raises NotFound."""
    alert = alerts_service.get(session, alert_id)
    tracked = tracking_repository.get(session, alert.tracked_branch_id)
    targets = {alert.id: alert.cases[0].case.target} if alert.cases else {}
    changes = [AlertChangeRead.model_validate(c, from_attributes=True)
               for c in alerts_repository.changes(session, alert_id)]
    culprit = alerts_repository.bisect_culprit(session, alert)
    why = why_line(evidence.why_of(session, culprit))
    return AlertsPage(alerts=_views(session, alert_reads(session, [alert]), targets), filters={}, tracked=[],
                      changes=changes, metric=METRIC_SHORT.get(tracked.metric, tracked.metric),
                      measured=_measured(session, tracked, alert), why=why,
                      why_url=evidence_page(culprit.job_id, culprit.last_sha) if why and culprit else None)


@dataclass
class BranchRow:
    tracked: TrackedBranch
    trigger: str  # in words
    next_run: str  # in words
    alerts: Counter  # status -> count


def _trigger_words(t: TrackedBranch) -> str:
    every = _duration(t.interval_s)
    return {TrackTrigger.push: "every push (GitHub webhook)",
            TrackTrigger.schedule: f"every {every}",
            TrackTrigger.poll: f"every {every} when the head moved"}[t.trigger]


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min"


def next_run(t: TrackedBranch, now: datetime) -> str:
    """When the branch runs next, in words: on the next push, or its schedule's next time."""
    if t.trigger == TrackTrigger.push:
        return "on the next push"
    if t.last_run_at is None:
        return "at the next beat (never run)"
    last = t.last_run_at if t.last_run_at.tzinfo else t.last_run_at.replace(tzinfo=timezone.utc)
    due = last + timedelta(seconds=t.interval_s)
    when = "due now" if due <= now else due.strftime("%Y-%m-%d %H:%M UTC")
    return when + (" (if the head moved)" if t.trigger == TrackTrigger.poll else "")


def tracked_branches(session: Session) -> list[BranchRow]:
    """Every tracked branch with its trigger, last and next run and its alerts by status."""
    now = datetime.now(timezone.utc)
    counts = alerts_repository.status_counts(session)
    return [BranchRow(tracked=t, trigger=_trigger_words(t), next_run=next_run(t, now),
                      alerts=Counter(counts.get(t.id, {})))
            for t in tracking_repository.list_all(session)]


def alerts_of_jobs(session: Session, job_ids: list[int]) -> dict[tuple[int, str], tuple[int, str]]:
    """(bisect job id, culprit sha) -> (alert id, alert status) for the jobs that bisect an alert
    and named its culprit: a job's other culprits (another case's step) belong to no alert."""
    of_jobs = alerts_repository.of_jobs(session, job_ids)
    alerts = alerts_repository.by_ids(session, list(of_jobs.values()))
    return {(a.bisect_job_id, a.culprit_last_sha): (a.id, a.status.value) for a in alerts if a.culprit_last_sha}
