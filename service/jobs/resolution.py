"""From the refs of a submission to the job's revisions, without a network call in a request.

A request resolves its refs from the repository's mirror as it is, when that answer is exact:
every ref names a commit the mirror holds, and is a full sha (a commit's range never changes) or
the mirror was fetched less than PERFBISECT_MIRROR_FRESH_S ago. Otherwise (a ref the mirror does
not know may have been pushed since) the job is accepted at once, "resolving revisions"
(queued, no revisions yet), and its first advance_job task fetches the remote (killed past
PERFBISECT_FETCH_TIMEOUT_S, one fetch per remote at a time: a job whose remote is being fetched
waits for that fetch instead of starting another) and resolves it, or fails it with the reason.
A hung remote so costs one task slot for the timeout, never a request or a database connection.
The PR webhook's compare jobs are resolved the same way; their task also fetches the PR's
refs/pull/<n>/head (with the same timeout) when no branch holds the head, and a head that is in
neither fails the job with that reason.

Flushes, never commits; the git work of `fetch_target`/`finish` is local (the mirror) except
Mirror.fetch_once, which the task calls with no session open.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from perfbisect.gitrepo import CommitInfo, FetchStamp, GitError, Mirror, shown_url
from perfbisect.service.jobs import repository
from perfbisect.service.models import Job, JobKind, JobStatus, Repository, utcnow
from perfbisect.service.repos import service as repos
from perfbisect.service.settings import get_settings
from perfbisect.service.job_spec import CompareSpec, JobSpec, Toolchain, toolchain_of
from perfbisect.service.jobs import toolchain as toolchains
from perfbisect.service.webhooks.pr_cases import with_touched_cases

RESOLVING = "resolving revisions"
FULL_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


@dataclass(frozen=True)
class Resolved:
    good_sha: str
    bad_sha: str
    commits: list[CommitInfo]
    base_tip_sha: str | None = None  # a merge-base compare: the base as given, when not the merge base
    toolchain: Toolchain | None = None  # a toolchain bisect: its versions (the commits) at its commit

    def spec_fields(self) -> dict[str, Any]:
        """What the job's spec records of the resolution (the report says which base it used)."""
        tip = {"base_tip_sha": self.base_tip_sha} if self.base_tip_sha else {}
        axis = {"toolchain": self.toolchain.model_dump()} if self.toolchain else {}
        return {"good_sha": self.good_sha, "bad_sha": self.bad_sha, **tip, **axis}


def request_hash(kind: JobKind, repo: Repository, spec: JobSpec) -> str:
    """What the job will measure: once resolved, by shas ('main' and its sha are one request);
    before, by the refs as given."""
    normalized = spec.stored()
    if spec.resolved:
        normalized.pop("good", None), normalized.pop("bad", None)
    text = json.dumps({"kind": kind.value, "repository_id": repo.id, **normalized}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def unresolved(job: Job) -> bool:
    return job.progress.get("phase") == RESOLVING


def resolving_progress() -> dict[str, Any]:
    return {"revisions": 0, "measured": 0, "trials": 0, "phase": RESOLVING}


def bisect_range(mirror: Mirror, good: str, bad: str) -> Resolved:
    """good..bad in first-parent order from the mirror as it is. Raises GitError."""
    good_sha, bad_sha = mirror.resolve(good), mirror.resolve(bad)
    if good_sha == bad_sha:
        raise GitError(f"good ({good}) and bad ({bad}) are the same commit {good_sha[:12]}: nothing to bisect")
    count = mirror.count_first_parent(good_sha, bad_sha)
    if count > get_settings().max_range:
        raise GitError(f"the range holds {count} commits, over the cap of {get_settings().max_range}")
    return Resolved(good_sha, bad_sha, mirror.first_parent_range(good_sha, bad_sha))


def compare_pair(mirror: Mirror, base: str, head: str, merge_base: bool = False) -> Resolved:
    """The base (on the branch: it orders the history) and the head (a PR commit off it). With
    `merge_base` (a pull request), the base measured is the merge base of the two: what the PR
    changes, never the steps its base branch made since the PR branched off."""
    tip_sha, head_sha = mirror.resolve(base), mirror.resolve(head)
    base_sha = mirror.merge_base(tip_sha, head_sha) if merge_base else tip_sha
    if base_sha == head_sha:
        raise GitError("base and head are the same commit: nothing to compare" if base_sha == tip_sha else
                       f"the head {head_sha[:12]} is already in the base {tip_sha[:12]}: nothing to compare")
    based = replace(mirror.commit_info(base_sha), position=mirror.first_parent_depth(base_sha))
    return Resolved(base_sha, head_sha, [based, mirror.commit_info(head_sha)],
                    base_tip_sha=tip_sha if tip_sha != base_sha else None)


def toolchain_range(mirror: Mirror, good: str, bad: str, toolchain: Toolchain) -> Resolved:
    """A toolchain bisect: its versions as the revisions, at the one commit good (and bad) name."""
    sha = toolchains.commit_of(mirror, good, bad)
    commits = toolchains.revisions(toolchain)
    return Resolved(commits[0].sha, commits[-1].sha, commits, toolchain=toolchain.model_copy(update={"commit": sha}))


def resolve(kind: JobKind, mirror: Mirror, good: str, bad: str, *, merge_base: bool = False,
            toolchain: Toolchain | None = None) -> Resolved:
    if toolchain is not None:
        return toolchain_range(mirror, good, bad, toolchain)
    if kind == JobKind.compare:
        return compare_pair(mirror, good, bad, merge_base)
    return bisect_range(mirror, good, bad)


def exact_now(mirror: Mirror, refs: Sequence[str]) -> bool:
    """Whether the mirror as it is gives the remote's answer for `refs`: each resolves there, and
    each is a full sha (a commit never changes) or the mirror is fresh. A ref it does not know
    may have been pushed since: the task fetches and decides."""
    if not all(mirror.has_commit(ref) for ref in refs):
        return False
    return all(FULL_SHA.match(ref) for ref in refs) or mirror.fresh(get_settings().mirror_fresh_s)


@dataclass(frozen=True)
class FetchTarget:
    mirror: Mirror
    since: float  # a fetch that started after the job was submitted answers for it
    pull: int | None = None  # a PR's compare: its head may be only in refs/pull/<pull>/head
    head: str = ""


def fetch_target(session: Session, job_id: int) -> FetchTarget | None:
    """What to fetch for a job still resolving; None when it is resolved, finished or gone."""
    job = repository.get_job(session, job_id)
    if job is None or job.status.finished or not unresolved(job):
        return None
    pull = job.spec.pr_number if isinstance(job.spec, CompareSpec) else None
    return FetchTarget(repos.mirror_of(job.repository), job.created_at.timestamp(), pull, job.spec.bad)


def fetch(target: FetchTarget, timeout_s: float) -> FetchStamp | None:
    """Fetch the job's remote (Mirror.fetch_once: None when another task is fetching it now);
    for a PR whose head no branch holds, then its refs/pull/<n>/head, killed past `timeout_s`
    too. A head that cannot be fetched is the returned stamp's error (the mirror's is kept)."""
    stamp = target.mirror.fetch_once(target.since, timeout_s)
    if stamp is None or stamp.error or target.pull is None or target.mirror.has_commit(target.head):
        return stamp
    try:
        target.mirror.fetch_pull(target.pull, timeout_s)
    except GitError as exc:
        return replace(stamp, error=f"the head {target.head[:12]} of PR #{target.pull} is on no branch of "
                                    f"{shown_url(target.mirror.url)}, and refs/pull/{target.pull}/head could "
                                    f"not be fetched: {exc}")
    return stamp


def finish(session: Session, job_id: int, stamp: FetchStamp) -> list[int]:
    """Resolve the job from the mirror just fetched (or fail it with the fetch's error, or with
    a ref that does not resolve); returns the other jobs of the repository still resolving
    (their tasks found this fetch running: the caller advances them now)."""
    job = repository.get_job(session, job_id, lock=True)
    if job is None or job.status.finished or not unresolved(job):
        return []
    spec = job.spec
    try:
        if stamp.error:
            raise GitError(stamp.error)
        resolved = resolve(job.kind, repos.mirror_of(job.repository), spec.good, spec.bad,
                           merge_base=isinstance(spec, CompareSpec) and spec.merge_base, toolchain=toolchain_of(spec))
    except GitError as exc:
        job.status, job.finished_at = JobStatus.failed, utcnow()
        job.error = f"could not resolve the revisions: {exc}"
        job.progress = {**job.progress, "phase": None}
        session.flush()
        return repository.resolving_jobs(session, job.repository_id, exclude=job.id)
    repos.record_revisions(session, job.repository, resolved.commits)
    if isinstance(spec, CompareSpec) and spec.kernel_paths_pending:  # a PR's changed files, known now
        cases = with_touched_cases(session, job.repository, spec.cases, resolved.good_sha,
                                   resolved.bad_sha) or spec.cases
        repository.store_cases(session, job.repository_id, cases)
        spec = spec.updated(cases=cases, unset=["kernel_paths_pending"])
    job.spec = spec.updated(**resolved.spec_fields())
    job.revision_shas = [c.sha for c in resolved.commits]
    job.progress = {"revisions": len(resolved.commits), "measured": 0, "trials": 0}
    _rehash(session, job)
    return repository.resolving_jobs(session, job.repository_id, exclude=job.id)


def _rehash(session: Session, job: Job) -> None:
    """The job's request hash by shas; when an identical open job exists, this one is cancelled
    as its duplicate (the one-open-job-per-request rule)."""
    resolved_hash = request_hash(job.kind, job.repository, job.spec)
    try:
        with session.begin_nested():
            job.request_hash = resolved_hash
            session.flush()
    except IntegrityError:
        twin = repository.open_job_by_request(session, resolved_hash)
        job.status, job.finished_at = JobStatus.cancelled, utcnow()
        job.error = f"the same request as job {twin.id if twin else '?'}, once its refs were resolved"
        session.flush()
