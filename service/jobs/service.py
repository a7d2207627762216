"""Creating, reading and cancelling jobs. Flushes, never commits: the request or task owns the
transaction, so a request that fails validation leaves no half-written job."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from kernels.cases import case_name, normalise_params, parse_shape
from kernels.suites import UnknownSuite, get_suite
from service.errors import BadRequest, Conflict, NotFound
from service.jobs import repository
from service.jobs.schemas import Benchmark, BisectCreate, CompareCreate
from service.models import Case, Job, JobKind, JobStatus, Repository, utcnow
from service.repos import service as repos
from service.settings import get_settings
from workers.checkout import GitError


def resolve_cases(benchmarks: list[Benchmark]) -> list[dict[str, Any]]:
    """Validate suites and shapes; return the cases as {suite, target, params, name}, normalised
    once here (dtype aliases, the suite's defaults, key order) so that the stored name is the one
    the harness reports. Raises BadRequest naming the bad suite or shape."""
    cases: list[dict[str, Any]] = []
    for bench in benchmarks:
        custom = bench.suite.startswith("file:")
        if custom:
            if not bench.suite[5:] or ".." in bench.suite or bench.suite[5:].startswith("/"):
                raise BadRequest(f"custom suite {bench.suite!r} must be file:<relative path inside the repository>")
        else:
            try:
                suite = get_suite(bench.suite)
            except UnknownSuite as exc:
                raise BadRequest(str(exc)) from exc
        for shape in bench.shapes:
            try:
                params = normalise_params(parse_shape(shape) if isinstance(shape, str) else shape)
                if not custom:
                    params = suite.validate(params)
            except (ValueError, TypeError) as exc:
                raise BadRequest(f"shape {shape!r} for suite {bench.suite!r}: {exc}") from exc
            name = case_name(bench.suite, params)
            if any(c["name"] == name and c["target"] == bench.target for c in cases):
                raise BadRequest(f"case {name!r} is listed twice")
            cases.append({"suite": bench.suite, "target": bench.target, "params": params, "name": name})
    return cases


def _range(repo: Repository, good: str, bad: str) -> tuple[str, str, list]:
    mirror = repos.mirror_of(repo)
    try:
        mirror.ensure(fetch=True)
        good_sha, bad_sha = mirror.resolve(good), mirror.resolve(bad)
        if good_sha == bad_sha:
            raise GitError(f"good ({good}) and bad ({bad}) are the same commit {good_sha[:12]}: nothing to bisect")
        count = mirror.count_first_parent(good_sha, bad_sha)
        if count > get_settings().max_range:
            raise GitError(f"the range holds {count} commits, over the cap of {get_settings().max_range}")
        return good_sha, bad_sha, mirror.first_parent_range(good_sha, bad_sha)
    except GitError as exc:
        raise BadRequest(str(exc)) from exc


def _store_cases(session: Session, repo: Repository, cases: list[dict[str, Any]]) -> None:
    known = repository.cases_by_name(session, repo.id, [c["name"] for c in cases])
    for case in cases:
        if (case["suite"], case["target"], case["name"]) not in known:
            session.add(Case(repository_id=repo.id, suite=case["suite"], target=case["target"],
                             name=case["name"], params=case["params"]))


def _create(session: Session, kind: JobKind, repo: Repository, spec: dict[str, Any], commits: list) -> Job:
    repos.record_revisions(session, repo, commits)
    _store_cases(session, repo, spec["cases"])
    job = Job(kind=kind, repository_id=repo.id, spec=spec, revision_shas=[c.sha for c in commits],
              status=JobStatus.queued, progress={"revisions": len(commits), "measured": 0, "trials": 0})
    session.add(job)
    session.flush()
    return job


def create_bisect(session: Session, data: BisectCreate) -> Job:
    """Validate everything first (repository, suites, shapes, refs, range), then write."""
    repo = repos.get(session, data.repository)
    cases = resolve_cases(data.benchmarks or [])
    good_sha, bad_sha, commits = _range(repo, data.good, data.bad)
    spec = {
        "good": data.good, "bad": data.bad, "good_sha": good_sha, "bad_sha": bad_sha, "cases": cases,
        "device_class": data.device_class, "min_effect": data.min_effect, "metric": data.metric,
        "workers": data.workers, "max_trials": data.max_trials or get_settings().max_trials_per_revision,
        "policy": data.policy, "check_accuracy": data.check_accuracy,
    }
    return _create(session, JobKind.bisect, repo, spec, commits)


def create_compare(session: Session, data: CompareCreate) -> Job:
    """A PR's head against its base: a two-revision job that the same planner decides."""
    repo = repos.get(session, data.repository)
    cases = resolve_cases(data.benchmarks)
    mirror = repos.mirror_of(repo)
    try:
        mirror.ensure(fetch=True)
        base_sha, head_sha = mirror.resolve(data.base), mirror.resolve(data.head)
        if base_sha == head_sha:
            raise GitError("base and head are the same commit: nothing to compare")
        commits = [mirror.commit_info(base_sha), mirror.commit_info(head_sha)]
    except GitError as exc:
        raise BadRequest(str(exc)) from exc
    spec = {
        "good": data.base, "bad": data.head, "good_sha": base_sha, "bad_sha": head_sha, "cases": cases,
        "device_class": data.device_class, "min_effect": data.min_effect, "metric": data.metric,
        "workers": 2, "max_trials": get_settings().max_trials_per_revision, "pr_number": data.pr_number,
        "policy": None,
    }
    return _create(session, JobKind.compare, repo, spec, commits)


def get(session: Session, job_id: int) -> Job:
    job = repository.get_job(session, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


def cancel(session: Session, job_id: int) -> Job:
    """Stop dispatching: pending trials are cancelled; a running one finishes and is ignored."""
    job = repository.get_job(session, job_id, lock=True)
    if job is None:
        raise NotFound(f"no job {job_id}")
    if job.status.finished:
        raise Conflict(f"job {job_id} has already {job.status.value}")
    job.status = JobStatus.cancelled
    job.finished_at = utcnow()
    repository.cancel_in_flight(session, job.id)
    session.flush()
    return job
