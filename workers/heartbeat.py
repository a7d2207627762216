"""A running trial's heartbeat: a thread that, every cancel_poll_s, tells the database the
worker is alive (every heartbeat_s) and learns whether the trial is still wanted. The sandbox
polls `stopped` while repository code runs, so a cancel kills the trial within a few seconds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from types import TracebackType

from sqlalchemy.exc import SQLAlchemyError

from perfbisect.service.db import session_scope
from perfbisect.service.settings import get_settings
from perfbisect.service.trials import blocks

log = logging.getLogger(__name__)


class Heartbeat:
    """Beats for the trial (`trial_id`, `attempt`) and for the trials of its side-by-side block
    still to run after it (`block`: (id, attempt) pairs), which the worker owns meanwhile."""

    def __init__(self, trial_id: int, attempt: int, block: Sequence[tuple[int, int]] = ()) -> None:
        self.trial_id, self.attempt = trial_id, attempt
        self.owned = [(trial_id, attempt), *block]
        self._stopped = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{trial_id}", daemon=True)

    def stopped(self) -> bool:
        """True once the trial's job was cancelled or another attempt took the trial over."""
        return self._stopped.is_set()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        settings = get_settings()
        last_beat = time.monotonic()  # start() wrote the first heartbeat
        while not self._done.wait(settings.cancel_poll_s):
            beat = time.monotonic() - last_beat >= settings.heartbeat_s
            try:
                with session_scope() as session:
                    wanted = blocks.check_in(session, self.owned, beat=beat)
            except SQLAlchemyError as exc:  # the database is away: keep measuring, store later
                log.warning("trial %s: heartbeat failed (%s)", self.trial_id, exc.__class__.__name__)
                continue
            if beat:
                last_beat = time.monotonic()
            if not wanted:
                self._stopped.set()
                return
