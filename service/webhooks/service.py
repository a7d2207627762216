"""Turning a pull_request event into a compare job. Flushes through service.jobs, never
commits: the webhook request owns the transaction and queues the job's first round after it.

The benchmarks a PR is compared on are those configured for the branch it targets, plus the
cases whose kernel source it touches (service.webhooks.pr_cases).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.errors import BadRequest, NotFound
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import CompareCreate
from perfbisect.service.models import Job, Repository, WebhookDelivery
from perfbisect.service.suites import service as suites
from perfbisect.service.webhooks import repository
from perfbisect.service.webhooks.repo_urls import event_urls, normalized_url
from perfbisect.service.webhooks.pr_cases import pr_benchmarks
from perfbisect.service.webhooks.schemas import PullRequestEvent

def record_delivery(session: Session, delivery_id: str, body: bytes, event: str) -> WebhookDelivery | None:
    """Remember a verified delivery; None when its id or its exact body was seen before (GitHub's
    redelivery, or a captured delivery replayed). Concurrent copies: the unique constraints make
    the second wait for the first and then count as seen. Rolled back with the request, so a
    delivery that failed (a 4xx) may be redelivered."""
    digest = hashlib.sha256(body).hexdigest()
    if repository.delivery_seen(session, delivery_id, digest):
        return None
    delivery = WebhookDelivery(delivery_id=delivery_id, body_sha256=digest, event=event[:100])
    try:
        with session.begin_nested():
            session.add(delivery)
            session.flush()
    except IntegrityError:
        return None
    return delivery


def match_repository(session: Session, event_repository: dict[str, Any]) -> Repository:
    """The registered repository whose URL names the event's repository (by clone_url,
    ssh_url, html_url or full_name); the oldest one when several do. Raises NotFound."""
    urls = event_urls(event_repository)
    for repo in repository.all_repositories(session):
        if normalized_url(repo.url) in urls:
            return repo
    name = event_repository.get("full_name") or event_repository.get("clone_url") or "?"
    raise NotFound(f"no registered repository matches {name!r}: register it with POST /api/repositories "
                   f"using its clone URL ({event_repository.get('clone_url') or 'https://github.com/' + str(name)})")


@dataclass(frozen=True)
class CompareOutcome:
    job: Job
    created: bool  # False: an open job of the same base and head already existed
    superseded: tuple[int, ...] = ()  # earlier compare jobs of this PR, cancelled


def compare_pull_request(session: Session, event: PullRequestEvent) -> CompareOutcome:
    """The compare job of the PR's head sha against the merge base of its base and head shas (an
    existing open one of the same shas is reused); a new one cancels the PR's older queued or running compare jobs,
    whose head is stale. Raises NotFound (no registered repository matches), BadRequest (no
    benchmarks configured). Never fetches: shas the mirror does not hold yet are fetched by the
    job's first task (with refs/pull/<n>/head, and a timeout), which resolves or fails the job."""
    repo = match_repository(session, event.repository)
    pr = event.pull_request
    existing = repository.open_compare(session, repo.id, pr.base.sha, pr.head.sha)
    if existing is not None:
        return CompareOutcome(job=existing, created=False)
    chosen = pr_benchmarks(session, repo, pr.base.ref or repo.default_branch, pr.base.sha, pr.head.sha)
    if not chosen.cases:
        raise BadRequest(f"no benchmarks configured for {repo.name!r}: the PR bot compares the cases of the branch's "
                         f"tracked history or of a benchmark set (POST /api/tracked-branches, or POST "
                         f"/api/repositories/{repo.name}/benchmark-sets and PATCH its pr_policy.benchmark_set)")
    defaults = {k: v for k, v in (("device_class", chosen.device_class), ("min_effect", chosen.min_effect),
                                  ("metric", chosen.metric)) if v is not None}
    try:
        # measured against the merge base: a PR lagging its base branch is not credited with the base's steps
        request = CompareCreate(repository=repo.name, base=pr.base.sha, head=pr.head.sha, pr_number=pr.number,
                                merge_base=True, benchmarks=suites.benchmarks_of_cases(session, chosen.cases), **defaults)
    except (ValidationError, KeyError) as exc:
        raise BadRequest(f"the {chosen.source} of {repo.name!r} has benchmarks the PR bot cannot use: {exc}") from exc
    submission = jobs.submit_compare(session, request, SYSTEM)
    job = submission.job
    if not submission.created:  # an identical delivery's job, created meanwhile
        return CompareOutcome(job=job, created=False)
    if chosen.paths_pending:
        job.spec = job.spec.updated(kernel_paths_pending=True)  # the resolving task adds the touched cases
    stale = [j.id for j in repository.open_compares_of_pr(session, repo.id, pr.number) if j.id != job.id]
    for job_id in stale:
        jobs.cancel(session, job_id, SYSTEM)
    return CompareOutcome(job=job, created=True, superseded=tuple(stale))
