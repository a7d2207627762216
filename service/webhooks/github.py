"""Reporting a finished job on GitHub: the compare job's report on its pull request, and on
each pull request that a bisect named as an exact performance culprit, a comment saying so
with that culprit's per-case table.

`post_job_comments` is what a task calls once a job has finished. Each comment carries a hidden
marker naming the job and PR, so running it twice (a retried task) edits the earlier comment
instead of posting a second one. Without a GitHub token nothing is sent: the comments are
rendered and returned, which is also how they can be previewed.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from sqlalchemy.orm import Session

from service.errors import Conflict
from service.jobs import service as jobs
from service.jobs import views
from service.jobs.schemas import CulpritRead, JobRead
from service.reports.pr_comment import render_culprit_comment, render_job
from service.settings import get_settings
from service.webhooks.repo_urls import github_slug

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"


def marker(job_id: int, pr_number: int) -> str:
    return f"<!-- perfbisect:job={job_id}:pr={pr_number} -->"


def render_comments(job: JobRead) -> list[tuple[int, str]]:
    """(PR number, Markdown body) for every comment the job warrants: a compare job's report on
    spec["pr_number"]; a bisect's exact performance culprits grouped by the PR that merged them.
    Culprit ranges (an unbuildable commit hides the exact one) and commits without a PR number
    get no comment: blaming a PR needs the exact commit. Rendering is service.reports.pr_comment's."""
    public_url = get_settings().public_url
    comments: list[tuple[int, str]] = []
    if job.kind == "compare":
        if job.spec.get("pr_number"):
            comments.append((int(job.spec["pr_number"]), render_job(job, public_url)))
    elif job.kind == "bisect":
        by_pr: dict[int, list[CulpritRead]] = {}
        for c in job.culprits:
            if c.kind == "performance" and c.exact and c.pr_number:
                by_pr.setdefault(c.pr_number, []).append(c)
        comments += [(pr, render_culprit_comment(job, cs, public_url)) for pr, cs in by_pr.items()]
    return [(pr, f"{body}\n{marker(job.id, pr)}") for pr, body in comments]


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION, "User-Agent": "perfbisect"}


def _upsert_comment(client: httpx.Client, repo_api: str, pr: int, body: str, mark: str,
                    token: str) -> tuple[str, str | None]:
    """Edit this job's earlier comment on the PR if there is one (first 100 comments), else post
    one. Returns ("created" | "updated", its html_url). Raises httpx.HTTPError."""
    listed = client.get(f"{repo_api}/issues/{pr}/comments", params={"per_page": 100}, headers=_headers(token))
    listed.raise_for_status()
    earlier = next((c for c in listed.json() if mark in (c.get("body") or "")), None)
    if earlier is not None:
        response = client.patch(f"{repo_api}/issues/comments/{earlier['id']}", json={"body": body},
                                headers=_headers(token))
        action = "updated"
    else:
        response = client.post(f"{repo_api}/issues/{pr}/comments", json={"body": body}, headers=_headers(token))
        action = "created"
    response.raise_for_status()
    return action, response.json().get("html_url")


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
    slug = github_slug(job.repository.url)
    if slug is None:
        return []
    read = views.job_read(session, job)
    settings = get_settings()
    results = [{"repository": f"{slug[0]}/{slug[1]}", "issue_number": pr, "body": body, "posted": False,
                "action": None, "url": None, "error": None} for pr, body in render_comments(read)]
    if not settings.github_token or not results:
        return results
    repo_api = f"{settings.github_api_url.rstrip('/')}/repos/{slug[0]}/{slug[1]}"
    owned = client is None
    client = client or httpx.Client(timeout=30)
    try:
        for result in results:
            pr = result["issue_number"]
            try:
                result["action"], result["url"] = _upsert_comment(
                    client, repo_api, pr, result["body"], marker(job_id, pr), settings.github_token)
                result["posted"] = True
            except httpx.HTTPError as exc:
                result["error"] = str(exc)
                log.warning("commenting job %s on %s#%s failed: %s", job_id, result["repository"], pr, exc)
    finally:
        if owned:
            client.close()
    return results
