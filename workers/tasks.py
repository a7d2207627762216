"""Celery tasks. They take ids, open their own transaction, re-read their rows, and enqueue
follow-ups only after that transaction has committed. Both are idempotent: a redelivered
message (acks_late after a worker died) finds the work done, or does it again."""

from __future__ import annotations

import logging

from service.db import session_scope
from service.jobs import advance
from service.trials import service as trials
from workers import dispatch
from workers.celery_app import CONTROL_QUEUE, celery_app
from workers.runner import execute, worker_slot

log = logging.getLogger(__name__)


@celery_app.task(name="perfbisect.advance_job")
def advance_job(job_id: int) -> int:
    """Plan the next round of `job_id` and enqueue its trials on the job's device queue."""
    try:
        with session_scope() as session:
            planned = advance.advance(session, job_id)
    except Exception as exc:
        log.exception("advancing job %s failed", job_id)
        with session_scope() as session:
            advance.fail(session, job_id, f"planning failed: {exc}")
        raise
    for trial_id in planned.trial_ids:
        dispatch.send(run_trial, trial_id, queue=planned.queue)
    if planned.finished:
        dispatch.send(notify_job, job_id, queue=CONTROL_QUEUE)
    return len(planned.trial_ids)


@celery_app.task(name="perfbisect.notify_job")
def notify_job(job_id: int) -> int:
    """Comment on the pull requests a finished job concerns (a no-op without a GitHub token).
    A track job or an alert's bisect continues the tracking loop instead."""
    from service.webhooks.github import post_job_comments
    from workers.track_tasks import continue_loop  # imports this module

    if continue_loop(job_id):
        return 0
    with session_scope() as session:
        return len(post_job_comments(session, job_id))


@celery_app.task(name="perfbisect.run_trial")
def run_trial(trial_id: int) -> str:
    """Run one trial: mark it running (committed, so progress shows it), do the work with no
    session open, store the result in a second transaction, then ask the job to advance."""
    with session_scope() as session:
        work = trials.start(session, trial_id, worker_host=worker_slot())
    if work is None:
        return "skipped"
    try:
        result, build_s = execute(work)
    except Exception as exc:  # a bug in the worker: store it as the trial's failure, not a lost trial
        log.exception("trial %s crashed", trial_id)
        result, build_s = {"status": "error", "error": f"worker error: {exc!r}", "cases": []}, None
    with session_scope() as session:
        trials.record(session, trial_id, result, build_s=build_s)
    dispatch.send(advance_job, work.job_id, queue=CONTROL_QUEUE)
    return result.get("status", "error")
