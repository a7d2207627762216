"""Celery tasks of the tracking loop. Like workers/tasks.py: they take ids, own their
transaction, and send follow-ups only after it has committed.

    track_branch(tracked_id, head)  a push, a beat tick or a person: measure the new head(s)
    detect_alerts(tracked_id)       after a track job: change points -> alerts -> bisects, notifications
    comment_alert(alert_id)         an alert with an exact culprit (or fixed): the PR comments
    poll_tracked_branches()         Celery beat: the scheduled and polled branches that are due
"""

from __future__ import annotations

import logging

from perfbisect import dispatch
from perfbisect.queue import ADVANCE_JOB, COMMENT_ALERT, CONTROL_QUEUE, DETECT_ALERTS, TRACK_BRANCH, celery_app
from perfbisect.service.alerts import bot
from perfbisect.service.alerts import service as alerts
from perfbisect.service.db import session_scope
from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.job_spec import BisectSpec
from perfbisect.service.notifications import service as notifications
from perfbisect.service.models import JobKind, utcnow
from perfbisect.service.tracking import service as tracking
from perfbisect.workers.notify_tasks import send_deliveries

log = logging.getLogger(__name__)


def send_next(next_: alerts.Next) -> None:
    for job_id in next_.bisect_job_ids + next_.measure_job_ids:
        dispatch.send(ADVANCE_JOB, job_id, queue=CONTROL_QUEUE)
    for alert_id in dict.fromkeys(next_.comment_alert_ids):
        dispatch.send(COMMENT_ALERT, alert_id, queue=CONTROL_QUEUE)


@celery_app.task(name="perfbisect.track_branch")
def track_branch(tracked_id: int, head: str | None = None, only_if_moved: bool = False) -> str:
    """Start a run of the tracked branch: its track job, or straight to detection when every
    head was measured already."""
    with session_scope() as session:
        run = tracking.start_run(session, tracked_id, head, only_if_moved=only_if_moved)
        job_id = run.job.id if run.job is not None else None
    if job_id is not None:
        dispatch.send(ADVANCE_JOB, job_id, queue=CONTROL_QUEUE)
    elif run.moved:  # every head measured already (by a bisect, say): the histories may still have moved
        dispatch.send(DETECT_ALERTS, tracked_id, queue=CONTROL_QUEUE)
    return run.message


def _alert_deliveries(session, next_: alerts.Next) -> list[int]:
    """The deliveries of newly raised alerts and of culprits named without a bisect, in a
    savepoint: a failure is logged and loses no alert (the detection's own work commits)."""
    try:
        with session.begin_nested():
            return (notifications.alerts_raised(session, next_.raised)
                    + notifications.culprits_of_alerts(session, next_.named))
    except Exception:
        log.exception("notifying the subscribers of alerts %s failed", next_.raised + next_.named)
        return []


@celery_app.task(name="perfbisect.detect_alerts")
def detect_alerts(tracked_id: int) -> int:
    with session_scope() as session:
        next_ = alerts.detect(session, tracked_id)
        deliveries = _alert_deliveries(session, next_)
    send_next(next_)
    send_deliveries(deliveries)
    return len(next_.raised)


@celery_app.task(name="perfbisect.comment_alert")
def comment_alert(alert_id: int) -> int:
    with session_scope() as session:
        work = bot.comment_work(session, alert_id)
    if work is None:
        return 0
    outcome = bot.post(work)
    with session_scope() as session:
        bot.record(session, alert_id, outcome)
    return sum(c["posted"] for c in outcome["comments"])


@celery_app.task(name="perfbisect.poll_tracked_branches")
def poll_tracked_branches() -> int:
    with session_scope() as session:
        due = tracking.due(session, utcnow())
    for tracked_id, only_if_moved in due:
        dispatch.send(TRACK_BRANCH, tracked_id, None, only_if_moved, queue=CONTROL_QUEUE)
    return len(due)


def continue_loop(job_id: int) -> bool:
    """Called by notify_job when a job has finished: a track job goes on to detection, an
    alert's bisect attaches its culprit (and comments as the alert, not as a bisect). Returns
    True when the job belonged to the loop."""
    with session_scope() as session:
        job = jobs_repo.get_job(session, job_id)
        if job is None:
            return False
        if job.kind == JobKind.track:
            tracked_id = job.spec.tracked_branch_id
            next_ = None
        else:
            tracked_id = None
            next_ = alerts.job_finished(session, job_id) if isinstance(job.spec, BisectSpec) and job.spec.alert_id else None
    if tracked_id is not None:
        dispatch.send(DETECT_ALERTS, tracked_id, queue=CONTROL_QUEUE)
        return True
    if next_ is not None:
        send_next(next_)
        return True
    return False
