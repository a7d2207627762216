"""The Celery application and the names of its tasks. With REDIS_URL set, tasks go through Redis to `perfbisect worker`
processes; without it (the embedded default) they run in-process in eager mode.

Trials are long and expensive, so: acknowledge late (a worker killed mid-trial leaves the message
to be redelivered), prefetch one (a GPU node takes one trial at a time), and reject on worker loss.
"""

from __future__ import annotations

from celery import Celery

from perfbisect.service.settings import get_settings

# The service and the CLI send tasks by these names (perfbisect.dispatch); the task functions are
# defined in perfbisect.workers.tasks and .track_tasks, imported by the worker (and, embedded, on
# the first send), so nothing below the workers imports them.
ADVANCE_JOB = "perfbisect.advance_job"
RUN_TRIAL = "perfbisect.run_trial"
RUN_BLOCK = "perfbisect.run_block"  # a side-by-side block's trials, in order, on one worker
NOTIFY_JOB = "perfbisect.notify_job"
START_CHECK = "perfbisect.start_check"  # a PR's in-progress check run, once its compare job is queued
RECONCILE = "perfbisect.reconcile"
TRACK_BRANCH = "perfbisect.track_branch"
DETECT_ALERTS = "perfbisect.detect_alerts"
COMMENT_ALERT = "perfbisect.comment_alert"
POLL_TRACKED_BRANCHES = "perfbisect.poll_tracked_branches"
PRUNE_SAMPLES = "perfbisect.prune_samples"
DELIVER_NOTIFICATION = "perfbisect.deliver_notification"
TASK_MODULES = ["perfbisect.workers.tasks", "perfbisect.workers.track_tasks", "perfbisect.workers.notify_tasks"]

CONTROL_QUEUE = "control"
TRACK_POLL_S = 60.0  # how often beat looks for tracked branches that are due
PRUNE_S = 3600.0  # how often beat deletes raw samples past the retention (service/trials/retention.py)


def make_celery() -> Celery:
    settings = get_settings()
    app = Celery("perfbisect", broker=settings.redis_url or "memory://", include=TASK_MODULES)
    app.conf.update(
        task_always_eager=settings.embedded,
        task_eager_propagates=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=CONTROL_QUEUE,
        # Planning and notifying run on the control queue; trials are sent to their job's
        # device-class queue explicitly (workers/tasks.py).
        task_routes={name: {"queue": CONTROL_QUEUE} for name in (ADVANCE_JOB, NOTIFY_JOB, START_CHECK, RECONCILE,
                                                                PRUNE_SAMPLES, DELIVER_NOTIFICATION)},
        # The reconciler (service/trials/reconcile.py) re-sends what the broker lost; run by
        # `perfbisect worker --beat` (one per deployment) or `perfbisect beat`. A run that
        # waited longer than one interval is dropped: the next one does the same work.
        # `perfbisect worker --beat` runs these: the reconciler, tracked branches on a
        # schedule or polled, and the raw samples' retention.
        beat_schedule={"reconcile": {"task": RECONCILE, "schedule": settings.reconcile_interval_s,
                                     "options": {"queue": CONTROL_QUEUE, "expires": settings.reconcile_interval_s}},
                       "poll-tracked-branches": {"task": POLL_TRACKED_BRANCHES,
                                                 "schedule": TRACK_POLL_S, "options": {"queue": CONTROL_QUEUE}},
                       "prune-samples": {"task": PRUNE_SAMPLES, "schedule": PRUNE_S,
                                         "options": {"queue": CONTROL_QUEUE, "expires": PRUNE_S}}},
        beat_schedule_filename=str(settings.home / "celerybeat-schedule"),
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        # An unacknowledged trial comes back to the queue after this long (a worker that died;
        # heartbeats and the reconciler re-run its trial much sooner). Sweep for expired ones
        # every few seconds rather than kombu's default ~100 s.
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_s,
                                  "unacked_restore_interval": 5, "unacked_restore_throttle": 1},
        worker_hijack_root_logger=False,
    )
    return app


celery_app = make_celery()

