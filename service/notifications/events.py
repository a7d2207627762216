"""What a notification says: one JSON payload per event, the same for every channel (a webhook
posts it as is; Slack and email render its `title` and `lines`). Built from rows inside the
transaction that raised the event, so a delivery retried later sends what was true then.

Payload: {"event", "key" (what it is about: "alert:ID" or "job:ID"), "repository", "branch" (None for a job outside a tracked branch), "title"
(one line), "lines" (the details, plain text), "url" (the dashboard page, None without
PERFBISECT_PUBLIC_URL), and the event's own object: "alert" or "job"}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfbisect.service.models import Alert, Culprit, Job, TrackedBranch
from perfbisect.service.notifications.models import Event
from perfbisect.service.settings import get_settings
from perfbisect.service.webhooks.check import CheckVerdict


@dataclass(frozen=True)
class Notice:
    """An event about one repository (and branch), ready to be delivered."""

    event: Event
    repository_id: int
    branch: str | None
    payload: dict[str, Any]


def _url(path: str) -> str | None:
    public = get_settings().public_url
    return f"{public.rstrip('/')}{path}" if public else None


def _pct(rel: float | None) -> str:
    return "n/a" if rel is None else f"{rel * 100:+.1f}%"


def alert_raised(tracked: TrackedBranch, alert: Alert) -> Notice:
    """A new alert on a tracked branch (its cases loaded)."""
    where = f"{tracked.repository.name}@{tracked.branch} ({tracked.device_class})"
    what = (f"the head {alert.last_sha[:10]} fails to build or import ({alert.note})" if alert.kind.value == "broken"
            else f"{alert.magnitude * 100:.1f}% in {alert.first_sha[:10]}..{alert.last_sha[:10]}")
    title = f"perfbisect: {alert.kind.value.replace('_', ' ')} on {where}, {what}"
    cases = [{"case": c.case.name, "kind": c.kind.value, "rel": c.rel} for c in alert.cases]
    lines = [f"{c['case']}: {c['kind'].replace('_', ' ')} {_pct(c['rel'])}" for c in cases]
    body = {"id": alert.id, "kind": alert.kind.value, "status": alert.status.value, "magnitude": alert.magnitude,
            "before_sha": alert.before_sha, "first_sha": alert.first_sha, "last_sha": alert.last_sha,
            "tracked_branch_id": tracked.id, "device_class": tracked.device_class, "cases": cases}
    return Notice(Event.alert, tracked.repository_id, tracked.branch,
                  {"event": Event.alert.value, "key": f"alert:{alert.id}", "repository": tracked.repository.name, "branch": tracked.branch,
                   "title": title, "lines": lines, "url": _url(f"/dashboard/alerts/{alert.id}"), "alert": body})


def _culprit_lines(culprits: list[Culprit]) -> list[str]:
    lines = []
    for culprit in culprits:
        span = culprit.first_sha[:10] if culprit.first_sha == culprit.last_sha else \
            f"{culprit.first_sha[:10]}..{culprit.last_sha[:10]}"
        if culprit.kind.value == "correctness":
            lines.append(f"{span}: wrong results")
            continue
        steps = ", ".join(f"{case} {_pct(effect.get('rel'))}" for case, effect in culprit.effects.items())
        lines.append(f"{span}: {steps}")
    return lines


def _job_body(job: Job, culprits: list[Culprit] | None = None) -> dict[str, Any]:
    return {"id": job.id, "kind": job.kind.value, "status": job.status.value,
            "culprits": [{"kind": c.kind.value, "first_sha": c.first_sha, "last_sha": c.last_sha,
                          "exact": c.first_sha == c.last_sha, "effects": c.effects}
                         for c in (job.culprits if culprits is None else culprits)]}


def culprits_named(job: Job, tracked: TrackedBranch | None, alert_id: int | None,
                   culprits: list[Culprit] | None = None) -> Notice:
    """A finished bisect with culprits (its repository and culprits loaded); `tracked` and
    `alert_id` when it was an alert's bisect. `culprits`: a one-commit alert's culprit, named
    without a bisect on the track job that measured it (about the alert, not the whole job)."""
    named = job.culprits if culprits is None else culprits
    n, by = len(named), (f"bisect {job.id}" if culprits is None else f"alert {alert_id} (one commit, no bisect)")
    title = f"perfbisect: {by} of {job.repository.name} named {n} culprit{'s' if n != 1 else ''}"
    body = {**_job_body(job, named), "alert_id": alert_id}
    key = f"job:{job.id}" if culprits is None else f"alert:{alert_id}"
    url = _url(f"/dashboard/jobs/{job.id}" if culprits is None else f"/dashboard/alerts/{alert_id}")
    return Notice(Event.culprit, job.repository_id, tracked.branch if tracked else None,
                  {"event": Event.culprit.value, "key": key, "repository": job.repository.name,
                   "branch": tracked.branch if tracked else None, "title": title, "lines": _culprit_lines(named),
                   "url": url, "job": body})


def gate_failed(job: Job, verdict: CheckVerdict) -> Notice:
    """A compare job whose merge gate (service/webhooks/check.py) is a failure."""
    pr = job.spec.pr_number
    title = f"perfbisect: gate failed{f' on PR #{pr}' if pr else ''} of {job.repository.name}: {verdict.title}"
    body = {**_job_body(job), "pr_number": pr, "head_sha": job.revision_shas[-1] if job.revision_shas else None,
            "conclusion": verdict.conclusion, "summary": verdict.summary}
    return Notice(Event.gate_failure, job.repository_id, None,
                  {"event": Event.gate_failure.value, "key": f"job:{job.id}", "repository": job.repository.name, "branch": None,
                   "title": title, "lines": verdict.summary.splitlines(), "url": _url(f"/dashboard/jobs/{job.id}"),
                   "job": body})
