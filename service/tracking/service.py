"""Tracking branches: registering one, deciding which heads a run measures, and the `track`
job that measures them. Flushes, never commits: the request or task owns the transaction.

A run measures the branch's new head; the first run backfills (every k-th of the last M
first-parent commits). A head already measured on the device class with today's fingerprint,
or being measured by an open track job of the branch, is not measured again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from perfbisect.service.errors import BadRequest, Conflict, NotFound
from perfbisect.service.jobs import service as jobs
from perfbisect.service.job_spec import Remeasure, TrackSpec
from perfbisect.service.models import Job, Repository, TrackedBranch, TrackTrigger, Trial, TrialStatus, utcnow
from perfbisect.service.repos import service as repos
from perfbisect.service.suites import service as suites
from perfbisect.service.tracking import repository
from perfbisect.service.tracking.schemas import PushEvent, TrackedBranchCreate, TrackedBranchRead, TrackedBranchUpdate
from perfbisect.service.webhooks.service import match_repository
from perfbisect.gitrepo import GitError, Mirror

FAILED_WHOLE = (TrialStatus.build_error, TrialStatus.import_error, TrialStatus.timeout, TrialStatus.error)


def _mirror(repo: Repository, *, fetch: bool) -> Mirror:
    mirror = repos.mirror_of(repo)
    try:
        mirror.ensure(fetch=fetch)
    except GitError as exc:
        raise BadRequest(str(exc)) from exc
    return mirror


def first_parent_shas(mirror: Mirror, head: str, limit: int) -> list[str]:
    """The last `limit` first-parent commits up to `head`, oldest first."""
    repo = mirror.ensure(fetch=False)
    return list(reversed(repo.git.rev_list("--first-parent", f"--max-count={limit}", head).split()))


def backfill_heads(history: Sequence[str], every: int) -> list[str]:
    """Every `every`-th commit counted back from the newest (which is always measured), oldest first."""
    return list(reversed(list(reversed(history))[::every]))


def create(session: Session, data: TrackedBranchCreate) -> TrackedBranch:
    """Validate the repository, the benchmark set and the branch, then write. Raises NotFound,
    BadRequest (bad suite or shape, a branch that does not resolve), Conflict (already tracked)."""
    repo = repos.get(session, data.repository)
    cases = suites.cases_for(session, repo, data.benchmarks, data.benchmark_set)
    jobs.check_suites_fit_class(data.device_class, cases)
    mirror = _mirror(repo, fetch=True)
    try:
        mirror.resolve(f"refs/heads/{data.branch}")
    except GitError as exc:
        raise BadRequest(f"branch {data.branch!r} does not exist in {repo.url}") from exc
    if repository.find(session, repo.id, data.branch, data.device_class):
        raise Conflict(f"{repo.name} {data.branch} is already tracked on {data.device_class}")
    tracked = TrackedBranch(
        repository_id=repo.id, branch=data.branch, device_class=data.device_class, cases=cases, metric=data.metric,
        policy=data.policy.model_dump(exclude_none=True) if data.policy else None, trigger=TrackTrigger(data.trigger), interval_s=data.interval_s,
        backfill_every=data.backfill_every, backfill_depth=data.backfill_depth,
        trials_per_head=data.trials_per_head, min_magnitude=data.min_magnitude, max_bisects=data.max_bisects,
        confirm_trials=data.confirm_trials,
    )
    session.add(tracked)
    session.flush()
    tracked.repository = repo
    return tracked


def get(session: Session, tracked_id: int, *, lock: bool = False) -> TrackedBranch:
    tracked = repository.get(session, tracked_id, lock=lock)
    if tracked is None:
        raise NotFound(f"no tracked branch {tracked_id}")
    return tracked


def update(session: Session, tracked_id: int, data: TrackedBranchUpdate) -> TrackedBranch:
    """Change the trigger, the interval, the cases or the confirm trials. Raises NotFound (no
    such tracked branch), BadRequest (a suite, shape or set that is not usable on it)."""
    tracked = get(session, tracked_id, lock=True)
    if data.benchmarks is not None or data.benchmark_set is not None:
        try:
            cases = suites.cases_for(session, tracked.repository, data.benchmarks, data.benchmark_set)
        except NotFound as exc:  # the set named in the body: the body is what is wrong
            raise BadRequest(exc.message) from exc
        jobs.check_suites_fit_class(tracked.device_class, cases)
        tracked.cases = cases
    if data.trigger is not None:
        tracked.trigger = TrackTrigger(data.trigger)
    for field in ("interval_s", "confirm_trials"):
        if getattr(data, field) is not None:
            setattr(tracked, field, getattr(data, field))
    session.flush()
    return tracked


def remove(session: Session, tracked_id: int) -> None:
    """Stop tracking; its alerts go with it, its trials stay (they belong to their jobs)."""
    session.delete(get(session, tracked_id))
    session.flush()


def next_run_at(tracked: TrackedBranch) -> datetime | None:
    """When a scheduled or polled branch is due next (its first run is due at once); None for push."""
    if tracked.trigger == TrackTrigger.push:
        return None
    if tracked.last_run_at is None:
        return tracked.created_at
    return tracked.last_run_at + timedelta(seconds=tracked.interval_s)


def read(tracked: TrackedBranch) -> TrackedBranchRead:
    computed = ("repository", "trigger", "next_run_at")
    return TrackedBranchRead.model_validate(
        {**{k: getattr(tracked, k) for k in TrackedBranchRead.model_fields if k not in computed},
         "repository": tracked.repository.name, "trigger": tracked.trigger.value, "next_run_at": next_run_at(tracked)})


def _covered(trial: Trial, fingerprint: str | None, case_names: set[str]) -> bool:
    """A trial counts for a head when it failed as a whole (the head is unbuildable) or measured
    every tracked case with today's fingerprint."""
    if trial.status in FAILED_WHOLE:
        return True
    return trial.fingerprint == fingerprint and case_names <= {m.case.name for m in trial.measurements}


def unmeasured(session: Session, tracked: TrackedBranch, heads: Sequence[str]) -> list[str]:
    """The heads that still need measuring, in the order given."""
    fingerprint = repository.current_fingerprint(session, tracked.repository_id, tracked.device_class)
    names = {c["name"] for c in tracked.cases}
    counts = Counter(t.revision.sha for t in repository.finished_trials_at(
        session, tracked.repository_id, tracked.device_class, heads) if _covered(t, fingerprint, names))
    busy = repository.open_track_heads(session, tracked.id)
    return [sha for sha in heads if counts[sha] < tracked.trials_per_head and sha not in busy]


@dataclass(frozen=True)
class Run:
    """What one run did: the track job it created (None when every head was measured already)."""

    tracked_branch_id: int
    head: str | None
    heads: tuple[str, ...]
    job: Job | None
    message: str
    moved: bool = True


def start_run(session: Session, tracked_id: int, head: str | None = None, *, only_if_moved: bool = False) -> Run:
    """Fetch, find the heads to measure, create their track job. `head` (a push's new head)
    defaults to the branch tip. Raises NotFound, BadRequest (the branch or head is gone)."""
    tracked = get(session, tracked_id, lock=True)
    repo = tracked.repository
    mirror = _mirror(repo, fetch=True)
    try:
        head_sha = mirror.resolve(head or f"refs/heads/{tracked.branch}")
    except GitError as exc:
        raise BadRequest(f"{tracked.branch} of {repo.name}: {exc}") from exc
    tracked.last_run_at = utcnow()
    if only_if_moved and head_sha == tracked.last_sha:
        return Run(tracked.id, head_sha, (), None, f"{tracked.branch} has not moved from {head_sha[:10]}", moved=False)
    if tracked.last_sha is None:  # tracking starts: backfill
        wanted = backfill_heads(first_parent_shas(mirror, head_sha, tracked.backfill_depth), tracked.backfill_every)
    else:
        wanted = [head_sha]
    tracked.last_sha = head_sha
    heads = unmeasured(session, tracked, wanted)
    if not heads:
        return Run(tracked.id, head_sha, (), None, f"{len(wanted)} head(s) of {tracked.branch} measured already")
    job = _track_job(tracked, mirror, heads, tracked.trials_per_head, session)
    return Run(tracked.id, head_sha, tuple(heads), job,
               f"track job {job.id} measures {len(heads)} head(s) of {tracked.branch} up to {head_sha[:10]}")


def _track_job(tracked: TrackedBranch, mirror: Mirror, heads: Sequence[str], trials: int, session: Session,
               **spec_extra: Any) -> Job:
    # Heads are first-parent commits of the branch: their depth is their place in its history,
    # so each measured head is a point of /api/history and the overview as soon as it is stored.
    commits = [replace(mirror.commit_info(sha), position=mirror.first_parent_depth(sha)) for sha in heads]
    spec = TrackSpec(tracked_branch_id=tracked.id, branch=tracked.branch, cases=tracked.cases,
                     device_class=tracked.device_class, metric=tracked.metric, policy=tracked.policy,
                     trials_per_head=trials, min_effect=tracked.min_magnitude,
                     good=heads[0], bad=heads[-1], good_sha=heads[0], bad_sha=heads[-1], **spec_extra)
    return jobs.create_track(session, tracked.repository, spec, commits)


def start_remeasure(session: Session, tracked: TrackedBranch, before: str, after: str) -> Job:
    """A track job that measures a suspected step's two heads side by side (its trials alternate
    between them), `confirm_trials` each; its spec's `remeasure` names the pair. Raises
    BadRequest when the mirror is unusable."""
    mirror = _mirror(tracked.repository, fetch=False)
    return _track_job(tracked, mirror, [before, after], tracked.confirm_trials, session,
                      remeasure=Remeasure(before=before, after=after))


def push_targets(session: Session, event: PushEvent) -> list[TrackedBranch]:
    """The push-triggered tracked branches a push event moves (none for a deleted branch or a tag).
    Raises NotFound when no registered repository matches the event."""
    if event.deleted or event.branch is None:
        return []
    repo = match_repository(session, event.repository)
    return [t for t in repository.find(session, repo.id, event.branch) if t.trigger == TrackTrigger.push]


def due(session: Session, now: datetime) -> list[tuple[int, bool]]:
    """(tracked id, only_if_moved) of the scheduled and polled branches whose interval has passed."""
    return [(t.id, t.trigger == TrackTrigger.poll) for t in repository.scheduled(session)
            if (when := next_run_at(t)) is not None and when <= now]
