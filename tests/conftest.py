"""Test fixtures: the real PostgreSQL with the Alembic migrations applied (never create_all),
one rolled-back transaction per test, and API clients bound to that transaction: `client` sends
an admin token, `anonymous_client` none, and `make_client("submit")` one with the scopes given.

PostgreSQL and Redis are the machine's own (127.0.0.1:5432 database `test`, 127.0.0.1:6379);
`.ci/run` starts them when they are down. PERFBISECT_TEST_DATABASE_URL overrides the database.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.isolation import group_timed_e2e, isolate_xdist_worker, xdist_controller  # noqa: E402

# Under pytest-xdist every worker gets its own database (made from the migrations) and its own
# Redis server, so workers never drop each other's schema or flush each other's queues.
isolate_xdist_worker()
TEST_DATABASE_URL = os.environ.get("PERFBISECT_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
TEST_REDIS_URL = os.environ.get("PERFBISECT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
_HOME = Path(tempfile.mkdtemp(prefix="perfbisect-test-home-"))
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)  # what the tests' jobs left in it goes with it

# Settings are read once per process: pin them before any service module is imported. The xdist
# controller runs no test and keeps them out of its environment, so its workers start without
# them, as a single pytest process does (the containment tests read their parent's environ).
if not xdist_controller():
    os.environ["DATABASE_URL"] = TEST_DATABASE_URL
    os.environ.pop("REDIS_URL", None)
    os.environ["PERFBISECT_HOME"] = str(_HOME)
# A loaded test runner's control is unsteady: its pauses (60 + 120 + 240 s a job) would stall every
# end-to-end job. The tests of the pauses set it themselves (tests/test_job_rounds.py).
os.environ.setdefault("PERFBISECT_UNSTEADY_PAUSE_S", "0")
# Tests register repositories from temporary directories (tmp_path, the demo repository).
os.environ["PERFBISECT_LOCAL_REPO_ROOTS"] = tempfile.gettempdir()
# ... and send notifications to receivers on this host (tests/test_outbound.py refuses them).
os.environ["PERFBISECT_OUTBOUND_ALLOW"] = "127.0.0.1,::1,localhost"

from sqlalchemy import text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402


@pytest.fixture(scope="session")
def home() -> Path:
    return _HOME


@pytest.fixture(scope="session")
def migrated_engine():
    """A clean schema, migrated to head once per test session."""
    from perfbisect.service.db import get_engine
    from perfbisect.service.migrate import upgrade

    engine = get_engine()
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    upgrade()
    return engine


@pytest.fixture
def session(migrated_engine) -> Iterator[Session]:
    """A session inside a transaction that is rolled back after the test: commits inside the
    test only release savepoints."""
    connection = migrated_engine.connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        connection.close()


@pytest.fixture
def sent_tasks() -> list[tuple[str, tuple]]:
    return []


@pytest.fixture
def app(session: Session, sent_tasks):
    """The API whose requests use the test's transaction. Tasks a request would send after its
    commit are recorded in `sent_tasks` instead of run."""
    from perfbisect.service.api import create_app
    from perfbisect.service.api.deps import get_session

    app = create_app()

    def _session() -> Iterator[Session]:
        savepoint = session.begin_nested()
        try:
            yield session
        except Exception:
            savepoint.rollback()
            session.info.pop("after_commit", None)
            raise
        savepoint.commit()
        for task, args, _queue in session.info.pop("after_commit", []):
            sent_tasks.append((task, args))

    app.dependency_overrides[get_session] = _session
    return app


@pytest.fixture
def make_client(app, session: Session):
    """make_client("submit") -> a TestClient sending a new token with those scopes (none: no
    token). The token's principal is the client's `principal` attribute."""
    from fastapi.testclient import TestClient

    from perfbisect.service.auth import service as auth

    clients = []

    def make(*scopes: str):
        headers, principal = {}, None
        if scopes:
            row, token = auth.create_token(session, f"test-{'-'.join(scopes)}-{len(clients)}", auth.parse_scopes(scopes))
            headers, principal = {"Authorization": f"Bearer {token}"}, auth.principal_of(row)
        client = TestClient(app, raise_server_exceptions=True, headers=headers)
        client.principal = principal
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(make_client):
    """An admin's client: every operation is allowed."""
    return make_client("admin")


@pytest.fixture
def anonymous_client(make_client):
    return make_client()


@pytest.fixture
def read_client(make_client):
    return make_client("read")


@pytest.fixture
def submit_client(make_client):
    return make_client("submit")


@pytest.fixture(scope="session")
def demo_repo(tmp_path_factory) -> Path:
    """The demo kernel repository, written once per test session."""
    from perfbisect.kernels.demo import write_demo_repo

    return write_demo_repo(tmp_path_factory.mktemp("demo") / "minikern")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(items) -> None:
    group_timed_e2e(items)  # first, the fault tests and the demo bisects on a worker each


@pytest.fixture
def sandbox_home(monkeypatch):
    """A PERFBISECT_HOME the slots' uids can traverse (chmod 711, as production's must be: they
    reach the revision caches under it), so repository code runs as the sandbox user; the test
    home is root-only, where it runs as root. Yields the home."""
    from perfbisect.service.settings import get_settings
    from perfbisect.workers import sandbox

    home = Path(tempfile.mkdtemp(prefix="perfbisect-sandbox-home-"))
    home.chmod(0o711)
    monkeypatch.setattr(get_settings(), "home", home)
    sandbox.sandbox_user.cache_clear()  # decided once per process, from the home
    yield home
    sandbox.sandbox_user.cache_clear()
    shutil.rmtree(home, ignore_errors=True)
