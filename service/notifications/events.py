"""What a notification says: one JSON payload per event, the same for every channel (a webhook
posts it as is; Slack and email render its `title` and `lines`). Built from rows inside the
transaction that raised the event, so a delivery retried later sends what was true then.

Payload: {"event", "key" (what it is about: "alert:ID" or "job:ID"), "repository", "branch" (None
for a job outside a tracked branch), "title" (one line), "lines" (the details, plain text),
"url" (the dashboard page, None without PERFBISECT_PUBLIC_URL), "links" ([{label, url}]: the
alert's page, the job's, each case's chart, the PR of a gate), and the event's own object:
"alert" or "job"}. Every line is written by service/alerts/render.py, as the PR comment is, so
the channels cannot drift apart: the culprit's PR and subject, each case's step with its unit
and, for wrong results, the error against the tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from perfbisect.gitrepo import pr_number
from perfbisect.service.alerts.render import (METRIC_SHORT, SHAPE_KINDS, Link, commit_text, page_links, spread_text,
                                             step_text, wrong_text)
from perfbisect.service.models import Alert, Culprit, Job, Revision, TrackedBranch
from perfbisect.service.notifications.models import Event
from perfbisect.service.settings import get_settings
from perfbisect.service.webhooks.check import CheckVerdict
from perfbisect.service.webhooks.repo_urls import github_slug


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


def _links(repository: str, alert_id: int | None, job_id: int | None, cases: Sequence[str],
           job_label: str = "bisect job") -> list[dict[str, str]]:
    found = page_links(get_settings().public_url, repository, alert_id, job_id, cases, job_label)
    return [asdict(link) for link in found]


def _case_line(name: str, wrong: bool, effect: Mapping[str, Any] | None, metric: str) -> str:
    return wrong_text(name, effect) if wrong else step_text(name, effect or {}, metric)


def _what(tracked: TrackedBranch, alert: Alert) -> str:
    """The alert in a few words: the failing head, the wrong range, or the step with what it measured."""
    span = f"{alert.first_sha[:10]}..{alert.last_sha[:10]}"
    if alert.kind.value == "broken":
        return f"the head {alert.last_sha[:10]} fails to build or import ({alert.note})"
    if alert.kind.value == "wrong_results":
        return f"first wrong in {span}"
    if alert.kind.value in SHAPE_KINDS:
        return f"the calls' spread x{1 + alert.magnitude:.2f} in {span}"
    return f"a {alert.magnitude * 100:.1f}% step of the {METRIC_SHORT.get(tracked.metric, tracked.metric)} in {span}"


def alert_raised(tracked: TrackedBranch, alert: Alert, measured: Mapping[str, Mapping[str, Any]] | None = None) -> Notice:
    """A new alert on a tracked branch (its cases loaded). `measured`: per case, the medians with
    their unit at both heads, or a wrong case's error and tolerance (alerts.one_commit.measured)."""
    where = f"{tracked.repository.name}@{tracked.branch} ({tracked.device_class})"
    title = f"perfbisect: {alert.kind.value.replace('_', ' ')} on {where}, {_what(tracked, alert)}"
    cases = [{"case": c.case.name, "kind": c.kind.value, "rel": c.rel} for c in alert.cases]
    measured = measured or {}
    lines = [spread_text(c.case.name, c.kind.value, c.rel, c.mean_before, c.mean_after, c.pvalue)
             if c.kind.value in SHAPE_KINDS else
             wrong_text(c.case.name, measured.get(c.case.name)) if c.rel is None else
             step_text(c.case.name, {"rel": c.rel, "before": c.mean_before, "after": c.mean_after,
                                     **measured.get(c.case.name, {})}, tracked.metric)
             for c in alert.cases]
    body = {"id": alert.id, "kind": alert.kind.value, "status": alert.status.value, "magnitude": alert.magnitude,
            "before_sha": alert.before_sha, "first_sha": alert.first_sha, "last_sha": alert.last_sha,
            "tracked_branch_id": tracked.id, "device_class": tracked.device_class, "cases": cases}
    return Notice(Event.alert, tracked.repository_id, tracked.branch,
                  {"event": Event.alert.value, "key": f"alert:{alert.id}", "repository": tracked.repository.name, "branch": tracked.branch,
                   "title": title, "lines": lines, "url": _url(f"/dashboard/alerts/{alert.id}"),
                   "links": _links(tracked.repository.name, alert.id, None, [c["case"] for c in cases]),
                   "alert": body})


def _pr(revision: Revision | None, prs: Mapping[str, int]) -> int | None:
    """The PR that merged the culprit: known already (the alert's bot found it), the commit's, or
    the `(#123)` of its subject."""
    if revision is None:
        return None
    return prs.get(revision.sha) or revision.pr_number or pr_number(revision.subject)


def _culprit_lines(culprits: list[Culprit], revisions: Mapping[str, Revision], metric: str,
                   prs: Mapping[str, int]) -> list[str]:
    """Per culprit, its PR and subject, then each case's step (or error against the tolerance)."""
    lines = []
    for culprit in culprits:
        revision = revisions.get(culprit.last_sha)
        if culprit.first_sha == culprit.last_sha:
            head = "culprit " + commit_text(culprit.last_sha, revision.subject if revision else None,
                                            _pr(revision, prs))
        else:
            head = f"culprit one of {culprit.first_sha[:10]}..{culprit.last_sha[:10]}"
        wrong = culprit.kind.value == "correctness"
        lines.append(head + (": wrong results" if wrong else ""))
        lines += [f"  {_case_line(case, wrong, effect, metric)}" for case, effect in sorted(culprit.effects.items())]
    return lines


def _job_body(job: Job, culprits: list[Culprit] | None = None,
              revisions: Mapping[str, Revision] | None = None, prs: Mapping[str, int] | None = None) -> dict[str, Any]:
    revisions = revisions or {}

    def described(c: Culprit) -> dict[str, Any]:
        revision = revisions.get(c.last_sha) if c.first_sha == c.last_sha else None
        return {"kind": c.kind.value, "first_sha": c.first_sha, "last_sha": c.last_sha,
                "exact": c.first_sha == c.last_sha, "effects": c.effects,
                "subject": revision.subject if revision else None, "pr_number": _pr(revision, prs or {})}
    return {"id": job.id, "kind": job.kind.value, "status": job.status.value,
            "culprits": [described(c) for c in (job.culprits if culprits is None else culprits)]}


def culprits_named(job: Job, tracked: TrackedBranch | None, alert_id: int | None,
                   culprits: list[Culprit] | None = None, revisions: Mapping[str, Revision] | None = None,
                   prs: Mapping[str, int] | None = None) -> Notice:
    """A finished bisect with culprits (its repository and culprits loaded); `tracked` and
    `alert_id` when it was an alert's bisect. `culprits`: a one-commit alert's culprit, named
    without a bisect on the track job that measured it (about the alert, not the whole job).
    `revisions`: the culprit commits by sha (their subjects), `prs`: PRs known by sha."""
    named = job.culprits if culprits is None else culprits
    revisions, prs = revisions or {}, prs or {}
    n, by = len(named), (f"bisect {job.id}" if culprits is None else f"alert {alert_id} (one commit, no bisect)")
    title = f"perfbisect: {by} of {job.repository.name} named {n} culprit{'s' if n != 1 else ''}"
    exact = [revisions.get(c.last_sha) for c in named if c.first_sha == c.last_sha]
    if len(named) == 1 and exact:
        title += ": " + commit_text(named[0].last_sha, exact[0].subject if exact[0] else None, _pr(exact[0], prs))
    body = {**_job_body(job, named, revisions, prs), "alert_id": alert_id}
    key = f"job:{job.id}" if culprits is None else f"alert:{alert_id}"
    url = _url(f"/dashboard/jobs/{job.id}" if culprits is None else f"/dashboard/alerts/{alert_id}")
    metric = tracked.metric if tracked else job.spec.metric
    cases = sorted({case for c in named for case in c.effects})
    label = "bisect job" if culprits is None else "track job"
    return Notice(Event.culprit, job.repository_id, tracked.branch if tracked else None,
                  {"event": Event.culprit.value, "key": key, "repository": job.repository.name,
                   "branch": tracked.branch if tracked else None, "title": title,
                   "lines": _culprit_lines(named, revisions, metric, prs),
                   "url": url, "links": _links(job.repository.name, alert_id, job.id, cases, label), "job": body})


def _pull_link(job: Job, pr: int | None) -> list[dict[str, str]]:
    slug = github_slug(job.repository.url) if pr else None
    return [asdict(Link(f"PR #{pr}", f"https://github.com/{slug[0]}/{slug[1]}/pull/{pr}"))] if slug else []


def gate_failed(job: Job, verdict: CheckVerdict) -> Notice:
    """A compare job whose merge gate (service/webhooks/check.py) is a failure: links the PR, the
    job and each moved case's chart."""
    pr = job.spec.pr_number
    title = f"perfbisect: gate failed{f' on PR #{pr}' if pr else ''} of {job.repository.name}: {verdict.title}"
    body = {**_job_body(job), "pr_number": pr, "head_sha": job.revision_shas[-1] if job.revision_shas else None,
            "conclusion": verdict.conclusion, "summary": verdict.summary}
    cases = sorted({case for c in job.culprits for case in c.effects})
    return Notice(Event.gate_failure, job.repository_id, None,
                  {"event": Event.gate_failure.value, "key": f"job:{job.id}", "repository": job.repository.name, "branch": None,
                   "title": title, "lines": verdict.summary.splitlines(), "url": _url(f"/dashboard/jobs/{job.id}"),
                   "links": _pull_link(job, pr) + _links(job.repository.name, None, job.id, cases, "compare job"),
                   "job": body})
