"""The database is the source of truth: find what the broker or a worker forgot and repair it.

- a running trial whose worker stopped beating (killed, its node lost) goes back to pending and
  is sent again: it re-runs within heartbeat_timeout_s + one reconcile interval;
- a pending trial whose message is gone (the broker restarted without persistence, or the commit
  succeeded and the send failed) is sent again once its queue holds nothing;
- an open job with nothing in flight (its planning message was lost) is advanced again;
- a side-by-side block is repaired whole (service/trials/blocks.py): one whose worker died is
  abandoned and its job re-planned, one whose message is gone is sent again.

Every repair is idempotent on the worker side (start() skips a trial that another worker runs
and beats for; advance() skips a job with trials in flight), so a repair that races the normal
flow costs at most a no-op message. Flushes only; the task owns the transaction and sends the
messages after its commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.orm import Session

from perfbisect.service.models import TrialStatus, utcnow
from perfbisect.service.settings import get_settings
from perfbisect.service.trials import blocks, repository
from perfbisect.service.trials.service import beating

# is_queued(trial_id, queue) -> whether a message for the trial may still be waiting in the broker.
IsQueued = Callable[[int, str], bool]


@dataclass
class Repairs:
    trials: list[tuple[int, str]] = field(default_factory=list)  # (trial id, queue) to send again
    jobs: list[int] = field(default_factory=list)  # jobs to advance again
    revived: list[int] = field(default_factory=list)  # of `trials`: running ones whose worker died
    blocks: list[tuple[list[int], str]] = field(default_factory=list)  # (a block's trial ids, queue) to send again
    abandoned: int = 0  # blocks of dead workers abandoned (their jobs are in `jobs`)

    def __bool__(self) -> bool:
        return bool(self.trials or self.jobs or self.blocks)


def reconcile(session: Session, is_queued: IsQueued) -> Repairs:
    settings = get_settings()
    now = utcnow()
    repairs = Repairs()
    for trial in repository.running_trials(session):
        if not beating(trial, now, settings.heartbeat_timeout_s):
            trial.status, trial.dispatched_at, trial.heartbeat_at = TrialStatus.pending, now, None
            repairs.trials.append((trial.id, trial.device_class))
            repairs.revived.append(trial.id)
    for trial in repository.pending_trials_sent_before(session, now - timedelta(seconds=settings.redispatch_after_s)):
        if not is_queued(trial.id, trial.device_class):
            trial.dispatched_at = now
            repairs.trials.append((trial.id, trial.device_class))
    mended = blocks.repair(session, is_queued, now)
    repairs.blocks, repairs.abandoned = mended.resend, len(mended.abandoned)
    stalled = repository.stalled_jobs(session, now - timedelta(seconds=settings.redispatch_after_s))
    repairs.jobs.extend(sorted(set(stalled) | set(mended.abandoned)))
    session.flush()
    return repairs
