"""A server under overload never deadlocks its thread pool against its database pool.

A sync route holds its request's database connection (the session dependency) until its
response is serialized, and FastAPI serializes a response model in the thread pool too. With
fewer threads than requests in flight, the requests holding connections queued for a thread
behind requests that held threads and waited for a connection: every request in flight then
stalled until the pool timeout (bench/scale.py: 64 requests without an answer after an overload,
503s for 5 s after it stopped). Real app, real session dependency, real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

POOL_TIMEOUT_S = 3.0


@pytest.fixture
def small_pools(monkeypatch, migrated_engine):
    """Settings of a small server process: 2 pooled connections (+4 overflow), 24 requests in
    flight, a 3 s pool timeout; fresh engine and sessionmakers built from them, and the usual
    ones again afterwards."""
    from perfbisect.service import db
    from perfbisect.service.settings import get_settings

    caches = (get_settings, db.get_engine, db.get_sessionmaker, db.get_read_sessionmaker)
    monkeypatch.setenv("PERFBISECT_DB_POOL_SIZE", "2")
    monkeypatch.setenv("PERFBISECT_MAX_IN_FLIGHT", "24")
    monkeypatch.setenv("PERFBISECT_DB_POOL_TIMEOUT_S", str(POOL_TIMEOUT_S))
    for cache in caches:
        cache.cache_clear()
    yield get_settings()
    db.get_engine().dispose()
    for cache in caches:
        cache.cache_clear()


def test_a_burst_of_reads_past_the_pools_is_answered_without_waiting_for_the_pool_timeout(small_pools) -> None:
    from perfbisect.service.api import create_app

    assert small_pools.db_pool_size == 2 and small_pools.max_in_flight == 24
    app = create_app()

    async def burst() -> tuple[list[int], float]:
        async with app.router.lifespan_context(app):  # startup sizes the thread pool
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                t0 = time.perf_counter()
                answers = await asyncio.gather(*(client.get("/api/jobs") for _ in range(24)))
                return [r.status_code for r in answers], time.perf_counter() - t0

    statuses, seconds = asyncio.run(burst())
    assert statuses == [200] * 24, statuses
    assert seconds < POOL_TIMEOUT_S, f"the burst waited {seconds:.1f} s: the pools deadlocked until the timeout"
