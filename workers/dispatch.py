"""Enqueue tasks only after the transaction that made their rows has committed.

With a broker, `send` hands the task to Celery at once (callers call it after commit). In the
embedded default, Celery is eager; running a task inside another would nest every trial of a
bisect in one call stack, so embedded sends are queued here and `drain()` runs them one after
another, each task queueing its own follow-ups.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from celery import Task

from service.settings import get_settings

_pending: deque[tuple[Task, tuple[Any, ...], str | None]] = deque()
_lock = threading.Lock()
_drainer: threading.Thread | None = None


def send(task: Task, *args: Any, queue: str | None = None) -> None:
    if get_settings().embedded:
        with _lock:
            _pending.append((task, args, queue))
    else:
        task.apply_async(args=args, queue=queue)


def _next() -> tuple[Task, tuple[Any, ...]] | None:
    global _drainer
    with _lock:
        if not _pending:
            if _drainer is threading.current_thread():
                _drainer = None  # cleared under the lock, so a later send starts a new one
            return None
        task, args, _queue = _pending.popleft()
        return task, args


def drain() -> int:
    """Run queued embedded tasks until none are left; return how many ran."""
    ran = 0
    while (item := _next()) is not None:
        task, args = item
        try:
            task.apply(args=args, throw=True)
        except Exception:
            if _drainer is not threading.current_thread():
                raise
            # In the server's thread: the task recorded its failure on the job; keep going.
            logging.getLogger(__name__).exception("embedded task %s%r failed", task.name, args)
        ran += 1
    return ran


def drain_in_background() -> None:
    """For `perfbisect serve` without a broker: one thread runs the queue, so requests return."""
    global _drainer
    with _lock:
        if _drainer is None and _pending:
            _drainer = threading.Thread(target=drain, name="perfbisect-embedded-worker", daemon=True)
            _drainer.start()


def after_commit(session: Any, task: Task, *args: Any, queue: str | None = None) -> None:
    """Remember a task to send once `session`'s transaction commits (see send_committed)."""
    session.info.setdefault("after_commit", []).append((task, args, queue))


def send_committed(session: Any) -> None:
    """Called by the transaction owner after a successful commit; a rolled-back unit sends none."""
    for task, args, queue in session.info.pop("after_commit", []):
        send(task, *args, queue=queue)
    if get_settings().embedded:
        drain_in_background()


def idle() -> bool:
    """Embedded mode: nothing queued and no thread running the queue."""
    with _lock:
        return not _pending and _drainer is None
