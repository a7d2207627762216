"""Reporting a finished job on GitHub: the compare job's report on its pull request, and on
each pull request that a bisect named as an exact performance culprit, a comment saying so
with that culprit's per-case table.

`post_job_comments` is what a task calls once a job has finished. Each comment carries a hidden
marker, so posting again edits the earlier comment instead of posting a second one: a compare
report's marker names only its PR, so the compare job of every push to the PR (synchronize)
edits the PR's first report; a culprit comment's names the bisect job and the PR. Without a
GitHub token nothing is sent: the comments are rendered and returned, which is also how they can
be previewed. Every GitHub call goes through service.integrations.github.client.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from sqlalchemy.orm import Session

from perfbisect.service.errors import Conflict
from perfbisect.service.integrations.github.client import connect
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs import views
from perfbisect.service.jobs.schemas import CulpritRead, JobRead
from perfbisect.service.reports.pr_comment import render_culprit_comment, render_job
from perfbisect.service.settings import get_settings
from perfbisect.service.webhooks.check import CHECK_NAME, STATUS_STATE, GatePolicy, check_verdict
from perfbisect.service.webhooks.repo_urls import github_slug

log = logging.getLogger(__name__)


def marker(job_id: int, pr_number: int) -> str:
    """A bisect's culprit comment on one PR."""
    return f"<!-- perfbisect:job={job_id}:pr={pr_number} -->"


def compare_marker(pr_number: int) -> str:
    """The PR's compare report, whichever push's job wrote it."""
    return f"<!-- perfbisect:compare:pr={pr_number} -->"


def render_comments(job: JobRead) -> list[tuple[int, str, str]]:
    """(PR number, Markdown body, its marker) for every comment the job warrants: a compare job's
    report on its spec's pr_number; a bisect's exact performance culprits grouped by the PR that merged them.
    Culprit ranges (an unbuildable commit hides the exact one) and commits without a PR number
    get no comment: blaming a PR needs the exact commit. Rendering is service.reports.pr_comment's."""
    public_url = get_settings().public_url
    comments: list[tuple[int, str, str]] = []
    if job.kind == "compare":
        if job.spec.pr_number:
            pr = job.spec.pr_number
            comments.append((pr, render_job(job, public_url), compare_marker(pr)))
    elif job.kind == "bisect":
        by_pr: dict[int, list[CulpritRead]] = {}
        for c in job.culprits:
            if c.kind == "performance" and c.exact and c.pr_number:
                by_pr.setdefault(c.pr_number, []).append(c)
        comments += [(pr, render_culprit_comment(job, cs, public_url), marker(job.id, pr)) for pr, cs in by_pr.items()]
    return [(pr, f"{body}\n{mark}", mark) for pr, body, mark in comments]


def post_job_comments(session: Session, job_id: int, client: httpx.Client | None = None) -> list[dict[str, Any]]:
    """Post (or, with no settings.github_token, only render) the finished job's PR comments.

    Returns one dict per comment: repository ("owner/name"), issue_number, body, posted,
    action ("created"/"updated"/None), url (html_url), error (the HTTP failure, if any: one
    failed comment does not stop the others; nothing is raised for it). A repository that is
    not on GitHub gets no comments ([]). Reads the job, its culprits and revisions; writes
    nothing to the database. Raises NotFound for an unknown job, Conflict for one not finished.
    """
    job = jobs.get(session, job_id)
    if not job.status.finished:
        raise Conflict(f"job {job_id} is {job.status.value}: comments are posted once it has finished")
    if job.kind.value == "attribute":  # the bisect's culprit comments again, now with the attribution
        job = jobs.get(session, job.spec.parent_job_id)
    slug = github_slug(job.repository.url)
    if slug is None:
        return []
    read = views.job_read(session, job)
    settings = get_settings()
    comments = render_comments(read)
    results = [{"repository": f"{slug[0]}/{slug[1]}", "issue_number": pr, "body": body, "posted": False,
                "action": None, "url": None, "error": None} for pr, body, _ in comments]
    if not settings.github_token or not results:
        return results
    with connect(slug, client) as github:
        for result, (pr, body, mark) in zip(results, comments):
            try:
                result["action"], result["url"] = github.upsert_comment(pr, body, mark)
                result["posted"] = True
            except httpx.HTTPError as exc:
                result["error"] = str(exc)
                log.warning("commenting job %s on %s#%s failed: %s", job_id, result["repository"], pr, exc)
    return results


def _job_page(job_id: int) -> str | None:
    public_url = get_settings().public_url
    return f"{public_url.rstrip('/')}/dashboard/jobs/{job_id}" if public_url else None


def _set_gate(session: Session, job_id: int, head_sha: str, client: httpx.Client | None, conclusion: str | None,
              title: str, summary: str) -> dict[str, Any]:
    """The 'perfbisect' check run on `head_sha` (in progress while `conclusion` is None), or, where
    the token cannot create check runs (403/404: not a GitHub App), a commit status with the same
    verdict ('pending' while measuring). Returns {via ("check_run" | "status" | None), posted,
    error}; an HTTP failure is reported in `error`, not raised."""
    job = jobs.get(session, job_id)
    result: dict[str, Any] = {"via": None, "posted": False, "error": None}
    with connect(github_slug(job.repository.url), client) as github:
        try:
            try:
                github.check_run(head_sha, CHECK_NAME, conclusion, title, summary, _job_page(job_id))
                result["via"] = "check_run"
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code not in (403, 404):
                    raise
                state = STATUS_STATE[conclusion] if conclusion else "pending"
                description = ("inconclusive: " if conclusion == "neutral" else "") + title
                github.commit_status(head_sha, CHECK_NAME, state, description, _job_page(job_id))
                result["via"] = "status"
            result["posted"] = True
        except httpx.HTTPError as exc:
            result["error"] = str(exc)
            log.warning("setting the check of job %s on %s failed: %s", job_id, head_sha[:10], exc)
    return result


def start_check(session: Session, job_id: int, head_sha: str,
                client: httpx.Client | None = None) -> dict[str, Any] | None:
    """The gate of a PR's new head (opened, synchronize) in progress, set once its compare job is
    queued, so the PR shows it measuring; `post_check` completes that same check run. None for a
    job that is not a compare, has finished already, or is off GitHub, and without a token.
    Returns {head_sha, via, posted, error} (as _set_gate)."""
    job = jobs.get(session, job_id)
    if (job.kind.value != "compare" or job.status.finished or github_slug(job.repository.url) is None
            or not get_settings().github_token):
        return None
    return {"head_sha": head_sha, **_set_gate(session, job_id, head_sha, client, None, "measuring this head",
                                              f"Compare job {job_id} is measuring the pull request's head "
                                              "against its base.")}


def post_check(session: Session, job_id: int, client: httpx.Client | None = None) -> dict[str, Any] | None:
    """Set the merge gate of a finished compare job on its head commit: the check run named
    'perfbisect' (service.webhooks.check: failure on a regression or wrong results, success only
    when every case was decided, neutral or failure by the repository's pr_policy otherwise), or a
    commit status with the same verdict (_set_gate). None for a bisect job or a repository off
    GitHub. Returns {head_sha, conclusion, title, via ("check_run" | "status" | None), posted,
    error}; an HTTP failure is reported in `error`, not raised."""
    job = jobs.get(session, job_id)
    if not job.status.finished:
        raise Conflict(f"job {job_id} is {job.status.value}: its check is set once it has finished")
    slug = github_slug(job.repository.url)
    if job.kind.value != "compare" or slug is None or not job.revision_shas:
        return None
    policy = job.repository.pr_policy or {}
    gate = GatePolicy(**{k: policy[k] for k in ("inconclusive", "failed", "shapes") if k in policy})
    verdict = check_verdict(views.job_read(session, job), gate)
    result: dict[str, Any] = {"head_sha": job.revision_shas[-1], "conclusion": verdict.conclusion,
                              "title": verdict.title, "via": None, "posted": False, "error": None}
    if not get_settings().github_token:
        return result
    return {**result, **_set_gate(session, job_id, result["head_sha"], client, verdict.conclusion, verdict.title,
                                  verdict.summary)}
