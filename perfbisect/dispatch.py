"""Enqueue tasks, by name, only after the transaction that made their rows has committed.

Tasks are named by the constants of perfbisect.queue, so the API and the CLI send work without
importing the workers (which import the service).

With a broker, `send` hands the task to Celery at once (callers call it after commit). In the
embedded default, Celery is eager; running a task inside another would nest every trial of a
bisect in one call stack, so embedded sends are queued here and `drain()` runs them (each task
queueing its own follow-ups), on as many threads as `PERFBISECT_EMBEDDED_WORKERS`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from celery import Task

from perfbisect.queue import (
    ADVANCE_JOB, POLL_TRACKED_BRANCHES, PRUNE_S, PRUNE_SAMPLES, RECONCILE, RUN_BLOCK, RUN_TRIAL, TRACK_POLL_S,
    celery_app,
)
from perfbisect.service.settings import get_settings

log = logging.getLogger(__name__)

_pending: deque[tuple[str, tuple[Any, ...], str | None]] = deque()
_held: list[tuple[float, str, tuple[Any, ...], str | None]] = []  # embedded sends with a countdown, and when due
_lock = threading.Lock()
_plan_lock = threading.Lock()
_drainer: threading.Thread | None = None
# Set once a process that is about to exit gave up waiting for the queue: no task starts any more.
_closed = threading.Event()


def send(task: str, *args: Any, queue: str | None = None, countdown: float = 0) -> None:
    """Send the task named `task` (a perfbisect.queue constant) with `args`, to run no sooner
    than `countdown` seconds from now (Celery's countdown; embedded, held back until then)."""
    if get_settings().embedded:
        with _lock:
            if countdown > 0:
                _held.append((time.monotonic() + countdown, task, args, queue))
            else:
                _pending.append((task, args, queue))
    else:
        celery_app.send_task(task, args=args, queue=queue, countdown=countdown or None)


def _release() -> float | None:
    """Under the lock: move the held sends that are due to the queue; the seconds until the
    next held one is due (None when none is held)."""
    now = time.monotonic()
    for held in [h for h in _held if h[0] <= now]:
        _held.remove(held)
        _pending.append(held[1:])
    return min(h[0] for h in _held) - now if _held else None


def task_named(name: str) -> Task:
    """The task function registered under `name`; the first call imports the task modules."""
    if name not in celery_app.tasks:
        celery_app.loader.import_default_modules()
    return celery_app.tasks[name]


def queued_probe() -> Callable[[int, str], bool]:
    """For the reconciler: may a message for this trial still be waiting? Embedded: whether it
    is in this process's queue. With a broker: whether its queue holds any message (a worker
    takes one trial at a time and acks late, so a trial whose queue is empty and which no worker
    runs has lost its message). When the broker cannot be asked, assume it is queued."""
    if get_settings().embedded:
        with _lock:
            sends = [*_pending, *(held[1:] for held in _held)]
            queued = {args[0] for name, args, _q in sends if name == RUN_TRIAL}
            queued |= {trial_id for name, args, _q in sends if name == RUN_BLOCK for trial_id in args[0]}
        return lambda trial_id, _queue: trial_id in queued
    sizes: dict[str, int | None] = {}

    def size(queue: str) -> int | None:
        if queue not in sizes:
            try:
                with celery_app.connection_for_read() as conn:
                    sizes[queue] = conn.default_channel.queue_declare(queue=queue, passive=True).message_count
            except Exception as exc:  # a queue never declared is empty; a broker that is down is unknown
                sizes[queue] = 0 if "NOT_FOUND" in str(exc) or "404" in str(exc) else None
        return sizes[queue]

    return lambda _trial_id, queue: size(queue) != 0


def _take(limit: int) -> list[tuple[str, tuple[Any, ...]]]:
    with _lock:
        _release()
        taken = []
        if _closed.is_set():
            return taken
        while _pending and len(taken) < limit:
            task, args, _queue = _pending.popleft()
            taken.append((task, args))
        return taken


def _finished() -> bool:
    """True when nothing is queued or held; the background drainer then clears itself under the
    lock, so a send that comes later starts a new one. While only held sends are left, it waits
    for the next (up to a second at a time)."""
    global _drainer
    with _lock:
        closed = _closed.is_set()  # closed: what is left never starts, so it is finished
        if _pending and not closed:
            return False
        due_in = None if closed else _release()
    if due_in is not None:
        time.sleep(min(max(due_in, 0.0), 1.0))
        return False
    with _lock:
        if (_pending or _held) and not _closed.is_set():
            return False
        if _drainer is threading.current_thread():
            _drainer = None
        return True


def _apply(name: str, args: tuple[Any, ...]) -> None:
    task = task_named(name)
    if name == ADVANCE_JOB:
        # SQLite has no row locks: embedded planning rounds run one at a time.
        with _plan_lock:
            task.apply(args=args, throw=True)
    else:
        task.apply(args=args, throw=True)


def drain() -> int:
    """Run queued embedded tasks until none are left, up to `embedded_workers` at once (trials of
    one round run side by side, like that many Celery workers); return how many ran."""
    workers = max(1, get_settings().embedded_workers)
    background = _drainer is threading.current_thread()
    ran = 0
    with ThreadPoolExecutor(workers, thread_name_prefix="perfbisect-embedded") as pool:
        running: set[Future[None]] = set()
        while True:
            running |= {pool.submit(_apply, task, args) for task, args in _take(workers - len(running))}
            if not running:
                if _finished():
                    return ran
                continue
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                ran += 1
                if future.exception() is not None:
                    if not background:
                        raise future.exception()
                    # In the server's thread: the task recorded its failure on the job; keep going.
                    log.error("embedded task failed", exc_info=future.exception())


def drain_in_background() -> None:
    """For `perfbisect serve` without a broker: one thread runs the queue, so requests return."""
    global _drainer
    with _lock:
        if _drainer is None and (_pending or _held):
            _drainer = threading.Thread(target=drain, name="perfbisect-embedded-worker", daemon=True)
            _drainer.start()


def after_commit(session: Any, task: str, *args: Any, queue: str | None = None) -> None:
    """Remember a task to send once `session`'s transaction commits (see send_committed)."""
    session.info.setdefault("after_commit", []).append((task, args, queue))


def queued(session: Any) -> bool:
    """Whether `session` holds tasks to send after its commit."""
    return bool(session.info.get("after_commit"))


def send_committed(session: Any) -> None:
    """Called by the transaction owner after a successful commit; a rolled-back unit sends none.
    A send that fails (the broker is down) is logged, not raised: what was committed stands, and
    the reconciler sends it once the broker is back (a submit returns its job, and the job runs)."""
    for task, args, queue in session.info.pop("after_commit", []):
        try:
            send(task, *args, queue=queue)
        except Exception:
            log.exception("could not send %s%r after commit; the reconciler will", task, args)
    if get_settings().embedded:
        drain_in_background()


def idle() -> bool:
    """Embedded mode: nothing queued and no thread running the queue."""
    with _lock:
        return not _pending and not _held and _drainer is None


def settle(timeout_s: float, poll_s: float = 0.1) -> bool:
    """Before a CLI process exits: wait up to `timeout_s` for the in-process queue to empty (the
    tasks it runs queue their follow-ups: an attribution's rounds, its trials), so that exiting
    does not cut a task off. True when it emptied (at once with a broker: nothing is queued here).
    When it did not, the queue is closed: no further task starts, the running ones finish (the
    interpreter waits for them at exit) and the jobs they leave open are resumed by the next
    process's reconciler."""
    deadline = time.monotonic() + timeout_s
    while not idle():
        if time.monotonic() >= deadline:
            _closed.set()
            return False
        time.sleep(poll_s)
    return True


# What beat runs besides the reconciler, and how often: without a broker the server runs them itself.
EMBEDDED_PERIODIC = ((POLL_TRACKED_BRANCHES, TRACK_POLL_S), (PRUNE_SAMPLES, PRUNE_S))


def embedded_upkeep(last_run: dict[str, float]) -> dict[str, float]:
    """One pass of the embedded server's upkeep, what beat schedules with a broker: reconcile
    (running what it re-sends on the embedded queue), and each task of EMBEDDED_PERIODIC whose
    period has passed since `last_run[name]` (a monotonic time; missing: never run): the
    scheduled and polled tracked branches that are due, the raw samples' retention. Returns
    `last_run`, updated."""
    task_named(RECONCILE)()
    for name, period in EMBEDDED_PERIODIC:
        if time.monotonic() - last_run.get(name, float("-inf")) >= period:
            task_named(name)()
            last_run[name] = time.monotonic()
    drain_in_background()
    return last_run


def start_embedded_reconciler(periodic: bool = True) -> threading.Thread:
    """Embedded server: the upkeep at start (jobs a previous process left in flight, branches
    due) and every reconcile_interval_s. Without `periodic`, only the reconciler (a CLI that
    follows a job resumes it, and never starts the tracked branches' polls)."""
    def loop() -> None:
        last_run: dict[str, float] = {}
        while True:
            try:
                if periodic:
                    embedded_upkeep(last_run)
                else:
                    task_named(RECONCILE)()
                    drain_in_background()
            except Exception:
                log.exception("embedded upkeep failed")
            time.sleep(get_settings().reconcile_interval_s)

    thread = threading.Thread(target=loop, name="perfbisect-reconciler", daemon=True)
    thread.start()
    return thread
