"""Delivering notifications (service/notifications): one task per delivery, sent after the
commit that created it. It reads the delivery, sends it with no transaction open, records the
attempt, and on a transient failure tries again later with Celery's exponential backoff (with
jitter, at most 10 min apart) until PERFBISECT_NOTIFY_MAX_ATTEMPTS; the delivery log says what
happened. Delivery is at least once: a receiver dedupes on X-Perfbisect-Delivery.

Embedded (no broker) the task runs in-process like every other; Celery's eager mode cannot
wait, so the retry is re-sent from a timer thread after the same backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from celery import Task
from celery.utils.time import get_exponential_backoff_interval

from perfbisect import dispatch
from perfbisect.queue import CONTROL_QUEUE, DELIVER_NOTIFICATION, celery_app
from perfbisect.service.db import session_scope
from perfbisect.service.notifications import channels
from perfbisect.service.notifications import service as notifications
from perfbisect.service.settings import get_settings

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 600


def send_deliveries(delivery_ids: Iterable[int]) -> None:
    """After the commit that created them."""
    for delivery_id in delivery_ids:
        dispatch.send(DELIVER_NOTIFICATION, delivery_id, queue=CONTROL_QUEUE)


def backoff_s(attempt: int) -> float:
    """The wait after failed attempt number `attempt` (from 1): Celery's exponential backoff with
    full jitter, computed in milliseconds (Celery's works in whole units)."""
    first_ms = max(1, round(get_settings().notify_backoff_s * 1000))
    return max(1, get_exponential_backoff_interval(first_ms, attempt - 1, MAX_BACKOFF_S * 1000, full_jitter=True)) / 1000


def _retry_embedded(delivery_id: int, delay_s: float) -> None:
    def resend() -> None:
        dispatch.send(DELIVER_NOTIFICATION, delivery_id, queue=CONTROL_QUEUE)
        dispatch.drain_in_background()

    timer = threading.Timer(delay_s, resend)
    timer.daemon = True
    timer.start()


@celery_app.task(name=DELIVER_NOTIFICATION, bind=True, max_retries=None)
def deliver_notification(self: Task, delivery_id: int) -> str:
    """One attempt; returns the delivery's state after it."""
    with session_scope() as session:
        work = notifications.work_of(session, delivery_id)
    if work is None:
        return "skipped"
    ok, retry, status, error = True, False, None, None
    try:
        status = channels.send(work.channel, work.target, work.secret, work.delivery_id, work.payload)
    except channels.Transient as exc:
        ok, retry, status, error = False, True, exc.status, str(exc)
    except channels.Refused as exc:
        ok, status, error = False, exc.status, str(exc)
    with session_scope() as session:
        again = notifications.record(session, delivery_id, ok=ok, retry=retry, status=status, error=error,
                                     max_attempts=get_settings().notify_max_attempts)
    if ok:
        return "delivered"
    log.warning("notification %s (%s) attempt %s failed: %s", delivery_id, work.channel.value, work.attempt, error)
    if not again:
        return "failed"
    delay_s = backoff_s(work.attempt)
    if get_settings().embedded:
        _retry_embedded(delivery_id, delay_s)
        return "retrying"
    raise self.retry(countdown=delay_s)
