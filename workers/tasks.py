"""Celery tasks. They take ids, open their own transaction, re-read their rows, and enqueue
follow-ups only after that transaction has committed. All are idempotent: a redelivered or
re-sent message finds the work done (or owned by a live worker), or does it again.

Database work is retried while the database is unreachable (workers/retrying.py): with acks_late
the message stays unacknowledged meanwhile, so a result is stored late, never lost."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial

from celery.signals import worker_init, worker_process_shutdown

from perfbisect import dispatch
from perfbisect.queue import (
    ADVANCE_JOB,
    CONTROL_QUEUE,
    NOTIFY_JOB,
    PRUNE_SAMPLES,
    RUN_BLOCK,
    RUN_TRIAL,
    START_CHECK,
    celery_app,
)
from perfbisect.service.db import database_unreachable, session_scope
from perfbisect.service.jobs import advance, resolution
from perfbisect.service.notifications import service as notifications
from perfbisect.service.settings import get_settings
from perfbisect.service.trials import blocks
from perfbisect.service.trials import reconcile as reconciler
from perfbisect.service.trials import retention
from perfbisect.service.trials import service as trials
from perfbisect.workers.heartbeat import Heartbeat
from perfbisect.workers.notify_tasks import send_deliveries
from perfbisect.workers.retrying import with_database
from perfbisect.workers.runner import execute, worker_slot

log = logging.getLogger(__name__)


def resolve_first(job_id: int) -> bool:
    """A job still resolving its revisions: fetch its remote (and a PR's pull ref) with no session
    open (one fetch per remote at a time, killed past PERFBISECT_FETCH_TIMEOUT_S), then resolve it
    or fail it. False
    when another task is fetching that remote now: that task advances this job when it is done."""
    with session_scope() as session:
        target = resolution.fetch_target(session, job_id)
    if target is None:
        return True
    stamp = resolution.fetch(target, get_settings().fetch_timeout_s)
    if stamp is None:
        return False

    def finish() -> list[int]:
        with session_scope() as session:
            return resolution.finish(session, job_id, stamp)

    for waiting in with_database(finish):
        dispatch.send(ADVANCE_JOB, waiting, queue=CONTROL_QUEUE)
    return True


@celery_app.task(name="perfbisect.advance_job")
def advance_job(job_id: int) -> int:
    """Plan the next round of `job_id` (resolving its revisions first, when the request could
    not) and enqueue its trials on the job's device queue."""
    if not with_database(lambda: resolve_first(job_id)):
        return 0

    def plan() -> advance.Round:
        with session_scope() as session:
            return advance.advance(session, job_id)

    try:
        planned = with_database(plan)
    except Exception as exc:
        if database_unreachable(exc):
            raise  # the reconciler advances the job once the database is back
        log.exception("advancing job %s failed", job_id)
        with session_scope() as session:
            advance.fail(session, job_id, f"planning failed: {exc}")
        raise
    for trial_id in planned.singles():
        dispatch.send(RUN_TRIAL, trial_id, queue=planned.queue, countdown=planned.countdown)
    for block in planned.blocks:
        dispatch.send(RUN_BLOCK, block, queue=planned.queue, countdown=planned.countdown)
    if planned.finished:
        dispatch.send(NOTIFY_JOB, job_id, queue=CONTROL_QUEUE)
    if planned.follow_up is not None:
        dispatch.send(ADVANCE_JOB, planned.follow_up, queue=CONTROL_QUEUE)
    for child_id in planned.children:
        dispatch.send(ADVANCE_JOB, child_id, queue=CONTROL_QUEUE)
    return len(planned.trial_ids)


@celery_app.task(name="perfbisect.notify_job")
def notify_job(job_id: int) -> int:
    """Comment on the pull requests a finished job concerns and set a compare job's check on its
    head commit (both no-ops without a GitHub token). A track job or an alert's bisect continues
    the tracking loop instead. First, the subscribers hear of its culprits or failed gate."""
    from perfbisect.service.webhooks.github import post_check, post_job_comments
    from perfbisect.workers.track_tasks import continue_loop  # imports this module

    _tell_subscribers(job_id)
    if continue_loop(job_id):
        return 0
    with session_scope() as session:
        posted = len(post_job_comments(session, job_id))
        post_check(session, job_id)
        return posted


@celery_app.task(name=START_CHECK)
def start_check(job_id: int, head_sha: str) -> bool:
    """The in-progress check run of a PR's compare job on its new head (notify_job completes it)."""
    from perfbisect.service.webhooks.github import start_check as start

    with session_scope() as session:
        result = start(session, job_id, head_sha)
    return bool(result and result["posted"])


def _tell_subscribers(job_id: int) -> None:
    """The deliveries of a finished job (its own transaction). A failure here is logged and
    never keeps the job's comments, check or tracking loop from going on."""
    try:
        with session_scope() as session:
            deliveries = notifications.job_finished(session, job_id)
    except Exception:
        log.exception("notifying the subscribers of job %s failed", job_id)
        return
    send_deliveries(deliveries)


# A worker whose trials fail on the worker itself (checkout, sandbox, a crash: worker_error) this
# many times in a row leaves, rather than fail every trial it takes faster than a healthy worker
# can take them; its supervisor restarts it fresh (docker-compose: restart: unless-stopped).
WORKER_ERRORS_TO_LEAVE = 2
_worker_errors = 0  # consecutive worker_error trials of this process


def _leave_if_broken(status: str, error: str | None, hostname: str | None) -> None:
    global _worker_errors
    _worker_errors = _worker_errors + 1 if status == "worker_error" else 0
    if _worker_errors >= WORKER_ERRORS_TO_LEAVE and hostname and not get_settings().embedded:
        log.error("%d trials in a row failed on this worker (last: %s); it stops taking trials: restart it "
                  "once that is fixed", _worker_errors, (error or "")[-500:])
        celery_app.control.shutdown(destination=[hostname])


def _run(work: trials.TrialWork, hostname: str | None, rest: Sequence[trials.TrialWork] = ()) -> str:
    """Do a started trial's work with no session open while a heartbeat thread reports it (and
    the `rest` of its block) alive and watches for a cancel, then store the result in its own
    transaction. Returns the stored status ("cancelled" when it was stopped)."""
    with Heartbeat(work.trial_id, work.attempt, [(w.trial_id, w.attempt) for w in rest]) as heartbeat:
        try:
            result, build_s = execute(work, should_stop=heartbeat.stopped)
        except Exception as exc:  # a bug in the worker: store it as the trial's failure, not a lost trial
            log.exception("trial %s crashed", work.trial_id)
            result, build_s = {"status": "worker_error", "error": f"worker error: {exc!r}", "cases": []}, None
    if heartbeat.stopped():
        result = {**result, "status": "cancelled"}

    def store() -> None:
        with session_scope() as session:
            trials.record(session, work.trial_id, result, build_s=build_s, attempt=work.attempt)

    with_database(store)
    _leave_if_broken(result.get("status", "error"), result.get("error"), hostname)
    return result.get("status", "error")


@celery_app.task(name=RUN_TRIAL, bind=True)
def run_trial(self, trial_id: int) -> str:
    """Run one trial: mark it running (committed, so progress shows it), run and store it
    (`_run`), then ask the job to advance."""

    def start() -> trials.TrialWork | None:
        with session_scope() as session:
            return trials.start(session, trial_id, worker_host=worker_slot())

    work = with_database(start)
    if work is None:
        return "skipped"
    status = _run(work, self.request.hostname)
    dispatch.send(ADVANCE_JOB, work.job_id, queue=CONTROL_QUEUE)
    return status


@celery_app.task(name=RUN_BLOCK, bind=True)
def run_block(self, trial_ids: list[int]) -> list[str]:
    """Run a side-by-side block (service/trials/blocks.py): claim its trials as one, run them in
    the block's A B B A order on this worker, each stored as it finishes, then ask the job to
    advance. Stopped (job cancelled, block abandoned), the rest are stored as cancelled. A block
    interrupted earlier (its worker died, the message came back) is abandoned: the job re-plans."""

    def claim() -> blocks.Claim:
        with session_scope() as session:
            return blocks.claim(session, trial_ids, worker_slot())

    claimed = with_database(claim)
    statuses = []
    for k, work in enumerate(claimed.works):
        if statuses and statuses[-1] == "cancelled":
            with_database(partial(_store_cancelled, work))
            statuses.append("cancelled")
        else:
            statuses.append(_run(work, self.request.hostname, claimed.works[k + 1:]))
    if claimed.works or claimed.abandoned:
        dispatch.send(ADVANCE_JOB, claimed.job_id, queue=CONTROL_QUEUE)
    return statuses or ["abandoned" if claimed.abandoned else "skipped"]


def _store_cancelled(work: trials.TrialWork) -> None:
    with session_scope() as session:
        trials.record(session, work.trial_id, {"status": "cancelled", "cases": []}, attempt=work.attempt)


@celery_app.task(name="perfbisect.reconcile")
def reconcile() -> dict[str, int]:
    """Re-send what the broker lost and re-advance stalled jobs (see service/trials/reconcile.py).
    Runs periodically (Celery beat in distributed mode, a thread in the embedded server)."""
    is_queued = dispatch.queued_probe()
    with session_scope() as session:
        repairs = reconciler.reconcile(session, is_queued)
    for trial_id, queue in repairs.trials:
        dispatch.send(RUN_TRIAL, trial_id, queue=queue)
    for block, queue in repairs.blocks:
        dispatch.send(RUN_BLOCK, block, queue=queue)
    for job_id in repairs.jobs:
        dispatch.send(ADVANCE_JOB, job_id, queue=CONTROL_QUEUE)
    if repairs:
        log.warning("reconciler: re-sent %d trial(s) (%d of dead workers) and %d block(s), abandoned %d block(s) of "
                    "dead workers, re-advanced %d job(s)", len(repairs.trials), len(repairs.revived),
                    len(repairs.blocks), repairs.abandoned, len(repairs.jobs))
    return {"trials": len(repairs.trials), "revived": len(repairs.revived), "jobs": len(repairs.jobs),
            "blocks": len(repairs.blocks), "abandoned": repairs.abandoned}


def prune_expired_samples(days: int, progress: Callable[[retention.Pruned], None] | None = None) -> retention.Pruned:
    """Delete the raw samples of every trial finished more than `days` ago (of a finished job),
    one transaction per batch: stopped midway, it keeps what it pruned."""
    before = retention.cutoff(days)
    total = retention.Pruned(0, 0)
    while True:
        with session_scope() as session:
            batch = retention.prune_batch(session, before)
        if not batch.trials:
            return total
        total = retention.Pruned(total.trials + batch.trials, total.samples + batch.samples)
        if progress:
            progress(total)


@celery_app.task(name=PRUNE_SAMPLES)
def prune_samples() -> dict[str, int]:
    """Hourly (beat): the raw samples past PERFBISECT_SAMPLES_RETENTION_DAYS; nothing when it is 0."""
    days = get_settings().samples_retention_days
    if not days:
        return {"trials": 0, "samples": 0}
    pruned = prune_expired_samples(days)
    if pruned.trials:
        log.info("retention: deleted the raw samples of %d trial(s) (%d rows) finished over %d days ago",
                 pruned.trials, pruned.samples, days)
    return {"trials": pruned.trials, "samples": pruned.samples}


@worker_init.connect
def _sweep_sandbox(**_kwargs) -> None:
    """A worker starting on a node wipes the sandbox slots its dead predecessors left behind
    (their worktrees, temp files and escaped processes)."""
    from perfbisect.workers.sandbox import sweep_idle_slots

    sweep_idle_slots()


@worker_process_shutdown.connect
def _stop_fork_servers(**_kwargs) -> None:
    """A pool process leaving at a warm shutdown ends with os._exit, which runs no atexit
    function: its fork servers stop here, and their directories (perfbisect-zygote-*) go."""
    from perfbisect.kernels.harness.launch import stop_servers

    stop_servers(wait_s=5)
