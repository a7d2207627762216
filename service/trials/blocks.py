"""Side-by-side blocks (issue 23): the four trials of a block (A B B A, `trials.block_slot`) are
claimed as one by the worker that takes the block's message, and run in that order on it, so
drift the control does not cancel falls on both revisions alike.

A block runs whole or not at all on one worker: its trials are marked running together, the
worker's heartbeat keeps them all alive, and a block whose worker died midway is never finished
elsewhere (trials of one revision measured on another worker, later, would pair drift again).
Its unfinished trials are abandoned (cancelled) and the job re-planned: the trials that did
finish keep their block id (a block with both revisions measured still pairs them), and the
planner asks for the blocks it still needs. Flushes only; the task owns the transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfbisect.service.models import Job, Trial, TrialStatus, utcnow
from perfbisect.service.settings import get_settings
from perfbisect.service.trials import repository
from perfbisect.service.trials.service import TrialGone, TrialWork, beating, start
from perfbisect.service.trials.service import check_in as trial_check_in

ABANDONED = "abandoned: the worker running its side-by-side block stopped; the block is measured anew"


@dataclass(frozen=True)
class Claim:
    """What a worker that took a block's message does: run `works` in order (empty: nothing),
    or, when `abandoned`, have job `job_id` re-planned (the block was interrupted earlier)."""

    job_id: int
    works: list[TrialWork] = field(default_factory=list)
    abandoned: bool = False


def _locked(session: Session, trial_ids: Sequence[int]) -> list[Trial]:
    stmt = select(Trial).where(Trial.id.in_(list(trial_ids))).order_by(Trial.block_slot).with_for_update()
    return list(session.scalars(stmt))


def abandon(trials: Sequence[Trial], reason: str | None = ABANDONED) -> None:
    """Cancel the block's unfinished trials (they tell nothing of their revisions), saying why."""
    for trial in trials:
        if not trial.status.finished:
            trial.status, trial.failure_reason, trial.finished_at = TrialStatus.cancelled, reason, utcnow()


def claim(session: Session, trial_ids: Sequence[int], worker_host: str) -> Claim:
    """Take the block of `trial_ids` for `worker_host`: every trial marked running (a new
    attempt each) and its work returned in the block's order. Nothing to run when the block is
    finished, its job is (its trials are then cancelled), or a live worker runs it (a duplicate
    message). A block some trial of which ran or started before (its worker died, the message
    came back) is abandoned. Raises TrialGone when its trials were deleted."""
    trials = _locked(session, trial_ids)
    if not trials:
        raise TrialGone(f"trials {list(trial_ids)} no longer exist")
    job_id = trials[0].job_id
    if session.get_one(Job, job_id).status.finished:
        abandon(trials, reason=None)
        return Claim(job_id)
    if all(t.status.finished for t in trials):
        return Claim(job_id)
    now = utcnow()
    if any(t.status == TrialStatus.running and beating(t, now, get_settings().heartbeat_timeout_s) for t in trials):
        return Claim(job_id)
    if any(t.status != TrialStatus.pending for t in trials):
        abandon(trials)
        return Claim(job_id, abandoned=True)
    works = [start(session, t.id, worker_host=worker_host) for t in trials]
    return Claim(job_id, [w for w in works if w is not None])


def check_in(session: Session, owned: Sequence[tuple[int, int]], *, beat: bool) -> bool:
    """A block's worker, every second or so: the heartbeat of every trial it still owns (id,
    attempt). False once any of them is no longer wanted (job cancelled, block abandoned)."""
    wanted = [trial_check_in(session, trial_id, attempt, beat=beat) for trial_id, attempt in owned]  # beat them all
    return all(wanted)


@dataclass
class BlockRepairs:
    resend: list[tuple[list[int], str]] = field(default_factory=list)  # (block's trial ids, queue)
    abandoned: list[int] = field(default_factory=list)  # jobs whose block was abandoned: re-plan them


def repair(session: Session, is_queued: Callable[[int, str], bool], now: datetime | None = None) -> BlockRepairs:
    """The reconciler's pass over open jobs' unfinished blocks. A started block none of whose
    trials beats (its worker died) is abandoned; a block never started whose message went out
    before redispatch_after_s and is not queued is sent again, whole."""
    settings = get_settings()
    now = now or utcnow()
    sent_before = now - timedelta(seconds=settings.redispatch_after_s)
    repairs = BlockRepairs()
    by_block: dict[tuple[int, int], list[Trial]] = defaultdict(list)
    for trial in repository.unfinished_block_trials(session):
        by_block[(trial.job_id, trial.block)].append(trial)
    for (job_id, _block), trials in sorted(by_block.items()):
        running = [t for t in trials if t.status == TrialStatus.running]
        if running:
            if not any(beating(t, now, settings.heartbeat_timeout_s) for t in running):
                abandon(trials)
                repairs.abandoned.append(job_id)
        elif all(t.dispatched_at is None or t.dispatched_at < sent_before for t in trials) and \
                not any(is_queued(t.id, t.device_class) for t in trials):
            for trial in trials:
                trial.dispatched_at = now
            repairs.resend.append(([t.id for t in trials], trials[0].device_class))
    return repairs
