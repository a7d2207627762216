"""Creating, reading and cancelling jobs. Flushes, never commits: the request or task owns the
transaction, so a request that fails validation leaves no half-written job.

One open job per request: a job carries the sha256 of its normalized request (refs resolved to
shas), unique among queued and running jobs, so identical submissions, concurrent or not, get
the same job; an `Idempotency-Key` gives a caller the same job for the same key, open or not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from perfbisect.kernels.harness.devices import ROCM_ONLY, vendor_of_class
from perfbisect.kernels.suites import suite_vendor
from perfbisect.service.auth.principal import SYSTEM, Principal
from perfbisect.service.errors import BadRequest, Conflict, Forbidden, NotFound
from perfbisect.service.jobs import repository, resolution
from perfbisect.service.job_spec import JobSpec, Toolchain, TrackSpec
from perfbisect.service.jobs import toolchain as toolchains
from perfbisect.service.jobs.quotas import check_quota
from perfbisect.service.jobs.schemas import BisectCreate, CompareCreate
from perfbisect.service.models import IdempotencyKey, Job, JobKind, JobStatus, Repository, utcnow
from perfbisect.service.repos import service as repos
from perfbisect.service.settings import get_settings
from perfbisect.service.suites import service as suites
from perfbisect.service.suites.schemas import Benchmark
from perfbisect.service.suites.targets import check_targets
from perfbisect.gitrepo import GitError, validate_ref


@dataclass(frozen=True)
class Submission:
    job: Job
    created: bool  # False: an open job of the same request, or the job of the same Idempotency-Key


def check_may_send_suites(benchmarks: list[Benchmark] | None, submitter: Principal) -> None:
    """A suite file in the request is code that runs on the workers, like a repository's build
    command: only an admin may send one; a submit token uses the benchmark sets an admin registered."""
    if any(b.suite_source is not None for b in benchmarks or []) and not submitter.is_admin:
        raise Forbidden("a suite_source runs on the workers: sending one needs the admin scope "
                        "(or use a benchmark set an admin registered on the repository)")


def check_device_class(name: str, cases: list[dict[str, Any]] = ()) -> None:
    """The class is served, and no case needs another vendor than it promises (the FlyDSL suites
    need ROCm: not the cpu or cuda class). Raises BadRequest."""
    served = get_settings().served_device_classes
    if name not in served:
        raise BadRequest(f"no worker serves device class {name!r}: use one of {', '.join(served)} "
                         "(PERFBISECT_DEVICE_CLASSES)")
    check_suites_fit_class(name, cases)


def check_suites_fit_class(name: str, cases: list[dict[str, Any]]) -> None:
    """No case needs another GPU vendor than the device class promises. Raises BadRequest."""
    promised = vendor_of_class(name)
    for case in cases:
        needs = suite_vendor(case.get("suite", ""))
        if needs is not None and promised is not None and needs != promised:
            raise BadRequest(f"suite {case['suite']} {ROCM_ONLY}: device class {name!r} does not have it "
                             "(submit to the rocm class, or a class served by ROCm workers)")


def _cases(session: Session, repo: Repository, data: BisectCreate | CompareCreate,
           submitter: Principal) -> list[dict[str, Any]]:
    """The job's cases; the targets sent in the request must be the repository's (a benchmark
    set's were registered by an admin)."""
    cases = suites.cases_for(session, repo, data.benchmarks, data.benchmark_set)
    if data.benchmark_set is None:
        check_targets(cases, submitter)
    return cases


def _resolved(kind: JobKind, repo: Repository, good: str, bad: str, fetch: bool,
              merge_base: bool = False, toolchain: Toolchain | None = None) -> resolution.Resolved | None:
    """The job's revisions: with `fetch`, from a mirror fetched now (CLI, tasks); else from the
    mirror as it is when that is exact, or None: a task resolves them (service/jobs/resolution.py).
    Raises BadRequest for a ref or range that cannot be."""
    mirror = repos.mirror_of(repo)
    try:
        for ref in (good, bad):
            validate_ref(ref)
        if fetch:
            mirror.ensure(fetch=True)
        elif not resolution.exact_now(mirror, [good, bad]):
            return None
        return resolution.resolve(kind, mirror, good, bad, merge_base=merge_base, toolchain=toolchain)
    except GitError as exc:
        raise BadRequest(str(exc)) from exc


def _create(session: Session, kind: JobKind, repo: Repository, spec: JobSpec,
            resolved: resolution.Resolved | list | None, submitter: Principal) -> Submission:
    """`resolved`: the range, the heads of a track job (a list), or None: resolved by a task."""
    commits = resolved.commits if isinstance(resolved, resolution.Resolved) else resolved or []
    if isinstance(resolved, resolution.Resolved):
        spec = spec.updated(**resolved.spec_fields())
    request_hash = resolution.request_hash(kind, repo, spec)
    existing = repository.open_job_by_request(session, request_hash)
    if existing is not None:
        return Submission(existing, created=False)
    check_quota(session, submitter)
    repos.record_revisions(session, repo, commits)
    repository.store_cases(session, repo.id, spec.cases)
    sources = suites.sources_read(session, spec.cases)
    if sources:  # shown with the job (JSON and page): which suite file, by content hash
        spec = spec.updated(suite_sources=[s.model_dump() for s in sources])
    job = Job(kind=kind, repository_id=repo.id, spec=spec, revision_shas=[c.sha for c in commits],
              status=JobStatus.queued, progress=({"revisions": len(commits), "measured": 0, "trials": 0}
                                                 if resolved is not None else resolution.resolving_progress()),
              submitter_token_id=submitter.token_id, request_hash=request_hash)
    try:
        with session.begin_nested():
            session.add(job)
            session.flush()
    except IntegrityError:
        # An identical submission committed meanwhile: the unique index waited for it, and this
        # statement (read committed) now sees its job.
        existing = repository.open_job_by_request(session, request_hash)
        if existing is None:
            raise Conflict("an identical job was being created at the same time: submit again") from None
        return Submission(existing, created=False)
    return Submission(job, created=True)


def _idempotent(session: Session, data: BaseModel, submitter: Principal, key: str | None,
                create: Callable[[], Submission]) -> Submission:
    """The job of `key` when this token used it before (a 422 when for another body), else a
    new submission remembered under `key`."""
    if key is None or submitter.token_id is None:
        return create()
    body_hash = hashlib.sha256(data.model_dump_json().encode()).hexdigest()
    seen = repository.idempotency_key(session, submitter.token_id, key)
    if seen is None:
        submission = create()
        try:
            with session.begin_nested():
                session.add(IdempotencyKey(token_id=submitter.token_id, key=key, body_hash=body_hash,
                                           job_id=submission.job.id))
                session.flush()
            return submission
        except IntegrityError:
            seen = repository.idempotency_key(session, submitter.token_id, key)
            if seen is None or (submission.created and seen.job_id != submission.job.id):
                raise Conflict(f"another request with Idempotency-Key {key!r} was handled at the same time: "
                               "send it again to get its job") from None
    if seen.body_hash != body_hash:
        raise BadRequest(f"Idempotency-Key {key!r} was used for a different request: use a new key")
    return Submission(get(session, seen.job_id), created=False)


def submit_bisect(session: Session, data: BisectCreate, submitter: Principal,
                  idempotency_key: str | None = None) -> Submission:
    """A request's bisect: never fetches (refs the mirror cannot answer exactly are resolved by
    the job's first task)."""
    return _idempotent(session, data, submitter, idempotency_key,
                       lambda: _bisect(session, data, submitter, fetch=False))


def submit_compare(session: Session, data: CompareCreate, submitter: Principal,
                   idempotency_key: str | None = None, *, fetch: bool = False) -> Submission:
    """A request's compare: never fetches (the webhook's neither), unless `fetch` (a caller that
    may wait on git)."""
    return _idempotent(session, data, submitter, idempotency_key,
                       lambda: _compare(session, data, submitter, fetch=fetch))


def create_bisect(session: Session, data: BisectCreate, submitter: Principal) -> Job:
    """The job of `data`, its range resolved from a mirror fetched now (for tasks, which may
    wait on git): a new one, or the open job of the same request."""
    return _bisect(session, data, submitter, fetch=True).job


def create_child(session: Session, repo: Repository, spec: JobSpec, resolved: resolution.Resolved | None,
                 submitter_token_id: int | None) -> Job:
    """A bisect the service starts itself (a descent's child: service/jobs/descent.py), on behalf
    of its parent's submitter: over `resolved`, or resolved by its first task when None; the open
    identical one if any."""
    made = _create(session, JobKind.bisect, repo, spec, resolved, SYSTEM)
    if made.created:
        made.job.submitter_token_id = submitter_token_id
    return made.job


def _bisect(session: Session, data: BisectCreate, submitter: Principal, fetch: bool) -> Submission:
    """Validate everything first (repository, suites, shapes, device class, refs, range), then write."""
    check_may_send_suites(data.benchmarks, submitter)
    toolchain = _toolchain(data, submitter)
    repo = repos.get(session, data.repository)
    cases = _cases(session, repo, data, submitter)
    check_device_class(data.device_class, cases)
    resolved = _resolved(JobKind.bisect, repo, data.good, data.bad, fetch, toolchain=toolchain)
    spec = data.to_spec(cases, get_settings().max_trials_per_revision, toolchain)
    return _create(session, JobKind.bisect, repo, spec, resolved, submitter)


def _toolchain(data: BisectCreate, submitter: Principal) -> Toolchain | None:
    """A toolchain bisect's versions, from its wheelhouse (a wheel is code the workers run, like
    a suite file: only an admin may name one). Raises Forbidden, BadRequest."""
    if data.toolchain is None:
        return None
    if not submitter.is_admin:
        raise Forbidden("a toolchain bisect installs wheels that run on the workers: it needs the admin scope")
    return toolchains.from_wheelhouse(data.toolchain.rules(), data.wheelhouse)


def _compare(session: Session, data: CompareCreate, submitter: Principal, fetch: bool) -> Submission:
    """A PR's head against its base: a two-revision job that the same planner decides."""
    check_may_send_suites(data.benchmarks, submitter)
    repo = repos.get(session, data.repository)
    cases = _cases(session, repo, data, submitter)
    check_device_class(data.device_class, cases)
    resolved = _resolved(JobKind.compare, repo, data.base, data.head, fetch, merge_base=data.merge_base)
    spec = data.to_spec(cases, get_settings().max_trials_per_revision)
    return _create(session, JobKind.compare, repo, spec, resolved, submitter)


def create_track(session: Session, repo: Repository, spec: TrackSpec, commits: list) -> Job:
    """A tracked branch's heads to measure (service.tracking decides which): no range to bisect.
    A run of the same heads while one is open is that open job."""
    return _create(session, JobKind.track, repo, spec, commits, SYSTEM).job


def get(session: Session, job_id: int) -> Job:
    job = repository.get_job(session, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


def cancel(session: Session, job_id: int, actor: Principal) -> Job:
    """Stop dispatching: pending trials are cancelled; a running one finishes and is ignored.
    Only the job's submitter or an admin may. Raises NotFound, Forbidden, Conflict."""
    job = repository.get_job(session, job_id, lock=True)
    if job is None:
        raise NotFound(f"no job {job_id}")
    if not actor.may_cancel(job.submitter_token_id):
        raise Forbidden(f"job {job_id} was submitted with another token: only its submitter or an admin may cancel it")
    if job.status.finished:
        raise Conflict(f"job {job_id} has already {job.status.value}")
    job.status = JobStatus.cancelled
    job.finished_at = utcnow()
    repository.cancel_in_flight(session, job.id)
    session.flush()
    return job
