"""Retry a unit of database work while the database is unreachable (tenacity): a worker that
finished a trial keeps its result and its message until it can store it, instead of acking
and losing it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_delay, wait_exponential

from perfbisect.service.db import database_unreachable
from perfbisect.service.settings import get_settings

log = logging.getLogger(__name__)
T = TypeVar("T")


def with_database(unit: Callable[[], T], *, give_up_after_s: float | None = None) -> T:
    """Run `unit` (which opens and commits its own session) until the database answers, backing
    off exponentially up to 10 s between tries, for at most store_retry_s; then re-raise."""
    limit = get_settings().store_retry_s if give_up_after_s is None else give_up_after_s
    retrying = Retrying(retry=retry_if_exception(database_unreachable), stop=stop_after_delay(limit),
                        wait=wait_exponential(multiplier=0.5, max=10), reraise=True,
                        before_sleep=before_sleep_log(log, logging.WARNING))
    return retrying(unit)
