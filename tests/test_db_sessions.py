"""The engine and sessions on the real PostgreSQL: a dropped pooled connection is replaced, reads
autocommit statement by statement, and a write stays one transaction."""

from __future__ import annotations

import asyncio
import tempfile
import threading

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from perfbisect.service import db
from perfbisect.service.settings import get_settings


@pytest.fixture
def engine():
    engine = db.make_engine(get_settings().sqlalchemy_url)
    yield engine
    engine.dispose()


def _backend_pid(engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(text("SELECT pg_backend_pid()"))


def _terminate(engine, pid: int) -> None:
    with db.make_engine(get_settings().sqlalchemy_url).connect() as other:
        assert other.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})


def test_an_idle_connection_the_database_dropped_is_replaced_before_use(engine, monkeypatch) -> None:
    first = _backend_pid(engine)  # back in the pool
    _terminate(engine, first)
    monkeypatch.setattr(db, "PING_IDLE_S", 0.0)  # it has been idle long enough to be pinged
    assert _backend_pid(engine) not in (first, None)


def test_a_connection_dropped_while_in_use_fails_one_statement_and_the_pool_heals(engine, monkeypatch) -> None:
    """Not pinged (used moments ago): its statement fails, which discards the pool's connections,
    and the next statement runs on a new one."""
    monkeypatch.setattr(db, "PING_IDLE_S", 3600.0)
    first = _backend_pid(engine)
    _terminate(engine, first)
    with pytest.raises(OperationalError), engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    assert _backend_pid(engine) != first


def _same_transaction(session) -> bool:
    """Whether a statement after a short pause still runs in the transaction of the one before."""
    session.execute(text("SELECT pg_sleep(0.02)"))
    return session.scalar(text("SELECT transaction_timestamp() < statement_timestamp()"))


def test_a_read_session_autocommits_each_statement_and_a_write_session_does_not() -> None:
    with db.session_scope(reads_only=True) as session:
        assert not _same_transaction(session)
    with db.session_scope() as session:
        assert _same_transaction(session)


def test_a_failed_write_session_leaves_nothing_behind() -> None:
    with db.session_scope() as session:
        session.execute(text("CREATE TABLE IF NOT EXISTS session_probe (n int)"))
    try:
        with pytest.raises(RuntimeError), db.session_scope() as session:
            session.execute(text("INSERT INTO session_probe VALUES (1)"))
            raise RuntimeError("the request failed")
        with db.session_scope(reads_only=True) as session:
            assert session.scalar(text("SELECT count(*) FROM session_probe")) == 0
    finally:
        with db.session_scope() as session:
            session.execute(text("DROP TABLE session_probe"))


def _sent_at_end(reads_only: bool, fail: bool) -> bytes:
    """What the session's end (commit or rollback, then close) sends to the database: libpq's
    protocol trace of its connection from after its last statement on."""
    with tempfile.TemporaryFile() as trace:
        scope = db.session_scope(reads_only=reads_only)
        session = scope.__enter__()
        session.execute(text("SELECT 1"))
        pgconn = session.connection().connection.dbapi_connection.pgconn
        pgconn.trace(trace.fileno())
        try:
            if fail:
                with pytest.raises(RuntimeError):
                    scope.__exit__(RuntimeError, error := RuntimeError("the route failed"), None)
                    raise error
            else:
                scope.__exit__(None, None, None)
        finally:
            pgconn.untrace()
        trace.seek(0)
        return trace.read()


@pytest.mark.parametrize("fail", [False, True], ids=["returned", "raised"])
def test_a_read_sessions_end_sends_nothing_so_the_event_loop_may_run_it(fail: bool) -> None:
    """api.deps.get_session ends a GET's session on the event loop, not in the thread pool: that
    is only right while ending it does no I/O. A write session's end does (its COMMIT or
    ROLLBACK), and runs in the pool."""
    assert _sent_at_end(reads_only=True, fail=fail) == b""
    assert (b"ROLLBACK" if fail else b"COMMIT") in _sent_at_end(reads_only=False, fail=fail)


async def _request_session(method: str, queue_task: bool) -> None:
    """Drive api.deps.get_session as FastAPI does for one request, queuing a task or not."""
    from starlette.requests import Request

    from perfbisect import dispatch
    from perfbisect.service.api.deps import get_session

    sessions = get_session(Request({"type": "http", "method": method, "headers": [], "path": "/"}))
    session = await sessions.__anext__()
    session.execute(text("SELECT 1"))
    if queue_task:
        dispatch.after_commit(session, "perfbisect.probe")
    with pytest.raises(StopAsyncIteration):
        await sessions.__anext__()


def test_a_request_that_queued_a_task_ends_in_the_thread_pool_even_a_read(monkeypatch) -> None:
    """A read's session ends on the event loop (no I/O), unless it queued a task: sending it is
    I/O (Redis), which must never block the loop."""
    from perfbisect import dispatch

    sent_from: list[str] = []
    monkeypatch.setattr(dispatch, "send", lambda *args, **kwargs: sent_from.append(threading.current_thread().name))
    loop_thread = threading.current_thread().name
    for method in ("GET", "POST"):
        asyncio.run(_request_session(method, queue_task=True))
        assert sent_from.pop() != loop_thread, method
    asyncio.run(_request_session("GET", queue_task=False))
    assert sent_from == []
