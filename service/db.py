"""Engine and session factory. Whoever owns the unit of work (a request, a task, a CLI command)
opens the session with `session_scope()`: commit on success, roll back on error. Services only
add and flush."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.settings import get_settings


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - trivial
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    # pre_ping: a connection the database dropped (a restart, a network cut) is replaced before
    # use, so the service recovers by itself; connect_timeout: an unreachable server fails a
    # request in seconds (503) instead of hanging it.
    return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 5})


def database_unreachable(exc: BaseException) -> bool:
    """A lost or refused connection (retry later), not a bug in the statement."""
    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


@lru_cache
def get_engine() -> Engine:
    settings = get_settings()
    if settings.sqlalchemy_url.startswith("sqlite"):
        settings.home.mkdir(parents=True, exist_ok=True)
    return make_engine(settings.sqlalchemy_url)


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


@contextmanager
def session_scope() -> Iterator[Session]:
    """The transaction owner: commit when the block succeeds, roll back when it raises."""
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
