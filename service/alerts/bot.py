"""The PR bot's side of the loop: once an alert has an exact culprit, comment on the pull
request that merged it (GitHub's commit-to-PR lookup, else the `(#123)` of the subject); once
the alert is fixed by a later step with an exact culprit, say so there and on the fixing PR.

Three steps so no transaction stays open over HTTP: `comment_work` reads (a session),
`post` talks to GitHub (no session), `record` stores the PR numbers and comment URLs (a
session). Each comment carries a marker, so a second run edits it instead of posting again
(found on any page of the PR's comments). Without a GitHub token the comments are rendered, not
sent. Every GitHub call goes through service.integrations.github.client.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy.orm import Session

from perfbisect.gitrepo import pr_number
from perfbisect.service.alerts import repository
from perfbisect.service.alerts.render import CaseStep, case_table, links, why_markdown
from perfbisect.service.evidence import service as evidence
from perfbisect.service.integrations.github.client import GitHubClient, connect
from perfbisect.service.models import Alert, AlertKind, AlertStatus
from perfbisect.service.repos.repository import revisions_by_sha
from perfbisect.service.settings import get_settings
from perfbisect.service.tracking import repository as tracking_repo
from perfbisect.service.webhooks.repo_urls import github_slug

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str


@dataclass(frozen=True)
class CommentWork:
    alert_id: int
    slug: tuple[str, str]
    headline: str
    table: list[str]
    culprit: Commit
    fix: Commit | None = None
    fix_alert_id: int | None = None
    known_prs: dict[str, int] = field(default_factory=dict)  # sha -> PR found earlier
    links: list[str] = field(default_factory=list)  # the alert, its bisect job, each case's chart
    bisected: bool = True  # False: the range held one commit, so tracking named it without a bisect


def _table(session: Session, alert: Alert, metric: str) -> list[str]:
    if alert.kind == AlertKind.broken:  # no case was measured: say what failed
        return [f"The head `{alert.last_sha[:10]}` fails to build or import ({alert.note or 'see the alert'})."]
    culprit = repository.bisect_culprit(session, alert)
    steps = [CaseStep(c.case.name, c.rel, c.mean_before, c.mean_after, c.pvalue, c.kind.value) for c in alert.cases]
    table = case_table(steps, metric, (culprit.effects or {}) if culprit is not None else {})
    why = why_markdown(evidence.why_of(session, culprit), culprit.job_id, culprit.last_sha,
                       get_settings().public_url) if culprit is not None else None
    return table + (["", why] if why else [])


def _job_of(session: Session, alert: Alert) -> tuple[int | None, str]:
    """The job that named the culprit: the alert's bisect, or the track job that measured a
    one-commit alert's culprit (its culprit row's job)."""
    if alert.bisect_job_id is not None:
        return alert.bisect_job_id, "bisect job"
    culprit = repository.bisect_culprit(session, alert)
    return (culprit.job_id if culprit is not None else None), "track job"


def _commit(session: Session, repository_id: int, sha: str) -> Commit:
    revision = revisions_by_sha(session, repository_id, [sha]).get(sha)
    return Commit(sha, revision.subject if revision else "")


def comment_work(session: Session, alert_id: int) -> CommentWork | None:
    """What there is to say about the alert, or None (no exact culprit, triaged away, or a
    repository that is not on GitHub). Reads only."""
    alert = repository.get(session, alert_id)
    if alert is None or alert.status in (AlertStatus.invalid, AlertStatus.expected):
        return None
    if alert.culprit_last_sha is None or alert.culprit_first_sha != alert.culprit_last_sha:
        return None
    tracked = tracking_repo.get(session, alert.tracked_branch_id)
    slug = github_slug(tracked.repository.url)
    if slug is None:
        return None
    fix_alert = repository.get(session, alert.fixed_by_id) if alert.fixed_by_id else None
    fix = None
    if fix_alert is not None and fix_alert.culprit_last_sha and fix_alert.culprit_first_sha == fix_alert.culprit_last_sha:
        fix = _commit(session, tracked.repository_id, fix_alert.culprit_last_sha)
    known = {alert.culprit_last_sha: alert.culprit_pr} if alert.culprit_pr else {}
    if fix is not None and fix_alert.culprit_pr:
        known[fix.sha] = fix_alert.culprit_pr
    kind = "broken head" if alert.kind == AlertKind.broken else alert.kind.value.replace('_', ' ')
    headline = (f"a {kind} on `{tracked.branch}` of **{tracked.repository.name}** "
                f"({tracked.device_class}), alert #{alert.id}")
    job_id, job_label = _job_of(session, alert)
    see = links(get_settings().public_url, tracked.repository.name, alert.id, job_id,
                [c.case.name for c in alert.cases], job_label)
    return CommentWork(alert.id, slug, headline, _table(session, alert, tracked.metric),
                       _commit(session, tracked.repository_id, alert.culprit_last_sha), fix,
                       fix_alert.id if fix_alert else None, known, see,
                       bisected=alert.bisect_job_id is not None)


def marker(alert_id: int, pr: int, role: str) -> str:
    return f"<!-- perfbisect:alert={alert_id}:{role}:pr={pr} -->"


def _found(work: CommentWork) -> str:
    """How the culprit was named: by a bisect, or by tracking alone (a one-commit range)."""
    named = f"`{work.culprit.sha[:10]}` ({work.culprit.subject})"
    if work.bisected:
        return f"Tracking found the step and a bisect named {named}:"
    return (f"Tracking measured {named} and the commit before it and found the step between them, "
            "so no bisect was needed:")


def render(work: CommentWork, culprit_pr: int, fix_pr: int | None) -> list[tuple[int, str, str]]:
    """(PR number, Markdown body, role) of each comment: on the culprit's PR and, once fixed by an
    exact commit, on the fixing PR."""
    fixed = ""
    if work.fix is not None:
        fixed = f"\n\n**Fixed**: the level came back at `{work.fix.sha[:10]}`" + (f" (#{fix_pr})." if fix_pr else ".")
    see = ["", " · ".join(work.links)] if work.links else []
    body = "\n".join([f"### perfbisect: {work.headline} traced to this pull request", "",
                      _found(work), "", *work.table, *see]) + fixed
    comments = [(culprit_pr, f"{body}\n{marker(work.alert_id, culprit_pr, 'culprit')}", "culprit")]
    if work.fix is not None and fix_pr:
        fix_body = "\n".join([f"### perfbisect: this pull request restored the level lost in alert #{work.alert_id}",
                              "", f"The step came from `{work.culprit.sha[:10]}` (#{culprit_pr}); "
                              f"`{work.fix.sha[:10]}` brought it back:", "", *work.table, *see])
        comments.append((fix_pr, f"{fix_body}\n{marker(work.alert_id, fix_pr, 'fix')}", "fix"))
    return comments


def pull_request_of(github: GitHubClient | None, commit: Commit) -> int | None:
    """The PR that merged `commit`: GitHub's commit-to-PR lookup (the merged one first), else the
    `(#123)` at the end of its subject (without a client, only the subject)."""
    if github is not None:
        try:
            pulls = sorted(github.pulls_of_commit(commit.sha), key=lambda p: p.get("merged_at") is None)
            if pulls:
                return int(pulls[0]["number"])
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            log.warning("commit-to-PR lookup of %s failed: %s", commit.sha[:10], exc)
    return pr_number(commit.subject)


def _comment(github: GitHubClient | None, work: CommentWork, pr: int, body: str, role: str) -> dict[str, Any]:
    """Post one comment (edit it, when its marker is on the PR already); without a client, only
    render it."""
    result: dict[str, Any] = {"pr": pr, "body": body, "posted": False, "url": None, "error": None}
    if github is None:
        return result
    try:
        _, result["url"] = github.upsert_comment(pr, body, marker(work.alert_id, pr, role))
        result["posted"] = True
    except httpx.HTTPError as exc:
        result["error"] = str(exc)
        log.warning("commenting alert %s on #%s failed: %s", work.alert_id, pr, exc)
    return result


def _post(github: GitHubClient | None, work: CommentWork) -> dict[str, Any]:
    culprit_pr = work.known_prs.get(work.culprit.sha) or pull_request_of(github, work.culprit)
    fix_pr = None
    if work.fix is not None:
        fix_pr = work.known_prs.get(work.fix.sha) or pull_request_of(github, work.fix)
    comments = [_comment(github, work, pr, body, role) for pr, body, role in
                (render(work, culprit_pr, fix_pr) if culprit_pr else [])]
    return {"culprit_pr": culprit_pr, "fix_pr": fix_pr, "comments": comments}


def post(work: CommentWork, client: httpx.Client | None = None) -> dict[str, Any]:
    """Find the PRs and post (or, without a token, only render) the comments. `client`: the
    httpx.Client to talk through (a test's mock). Returns {culprit_pr, fix_pr, comments: [{pr,
    body, posted, url, error}]}; an HTTP failure is reported, not raised."""
    if not get_settings().github_token:
        return _post(None, work)
    with connect(work.slug, client) as github:
        return _post(github, work)


def record(session: Session, alert_id: int, outcome: dict[str, Any]) -> None:
    """Store the culprit's PR and the posted comments' URLs on the alert (and the fixing PR on
    the fixing alert)."""
    alert = repository.get(session, alert_id, lock=True)
    if alert is None:
        return
    alert.culprit_pr = outcome.get("culprit_pr") or alert.culprit_pr
    posted = {str(c["pr"]): c["url"] for c in outcome.get("comments", []) if c["posted"]}
    if posted:
        alert.comments = {**alert.comments, **posted}
    if alert.fixed_by_id and outcome.get("fix_pr"):
        fixer = repository.get(session, alert.fixed_by_id)
        if fixer is not None and fixer.culprit_pr is None:
            fixer.culprit_pr = outcome["fix_pr"]
    session.flush()
