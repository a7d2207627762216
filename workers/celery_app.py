"""The Celery application. With REDIS_URL set, tasks go through Redis to `perfbisect worker`
processes; without it (the embedded default) they run in-process in eager mode.

Trials are long and expensive, so: acknowledge late (a worker killed mid-trial leaves the message
to be redelivered), prefetch one (a GPU node takes one trial at a time), and reject on worker loss.
"""

from __future__ import annotations

from celery import Celery
from celery.signals import worker_init

from service.settings import get_settings

CONTROL_QUEUE = "control"
TRACK_POLL_S = 60.0  # how often beat looks for tracked branches that are due


def make_celery() -> Celery:
    settings = get_settings()
    app = Celery("perfbisect", broker=settings.redis_url or "memory://", include=["workers.tasks", "workers.track_tasks"])
    app.conf.update(
        task_always_eager=settings.embedded,
        task_eager_propagates=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=CONTROL_QUEUE,
        # Planning and notifying run on the control queue; trials are sent to their job's
        # device-class queue explicitly (workers/tasks.py).
        task_routes={"perfbisect.advance_job": {"queue": CONTROL_QUEUE},
                     "perfbisect.notify_job": {"queue": CONTROL_QUEUE},
                     "perfbisect.reconcile": {"queue": CONTROL_QUEUE}},
        # The reconciler (service/trials/reconcile.py) re-sends what the broker lost; run by
        # `perfbisect worker --beat` (one per deployment) or `perfbisect beat`. A run that
        # waited longer than one interval is dropped: the next one does the same work.
        # `perfbisect worker --beat` runs these: the reconciler, and tracked branches on a
        # schedule or polled.
        beat_schedule={"reconcile": {"task": "perfbisect.reconcile", "schedule": settings.reconcile_interval_s,
                                     "options": {"queue": CONTROL_QUEUE, "expires": settings.reconcile_interval_s}},
                       "poll-tracked-branches": {"task": "perfbisect.poll_tracked_branches",
                                                 "schedule": TRACK_POLL_S, "options": {"queue": CONTROL_QUEUE}}},
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


@worker_init.connect
def _sweep_sandbox(**_kwargs) -> None:
    """A worker starting on a node wipes the sandbox slots its dead predecessors left behind
    (their worktrees, temp files and escaped processes)."""
    from workers.sandbox import sweep_idle_slots

    sweep_idle_slots()
