"""Keep pytest-xdist workers apart on one machine.

Each worker (PYTEST_XDIST_WORKER = gw0, gw1, ...) gets:
- its own PostgreSQL database, `<base database>_<worker>`, created when missing (the session
  fixture then migrates it from an empty schema, as a single process does);
- its own Redis server on a free port, started here and stopped when the worker exits, so the
  e2e tests' `flushdb` and queues never touch another worker's;
- its own suffix for the e2e databases (PERFBISECT_TEST_NS).
Without xdist nothing changes. Runs before any service module reads the environment.

And it runs the timed e2e tests first, in two groups of one worker each (`group_timed_e2e`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import time

import psycopg
import pytest

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def _start_redis() -> str:
    port = _free_port()
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port",
                             str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(proc.terminate)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return f"redis://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the worker's redis-server did not start")


def xdist_controller() -> bool:
    """This process hands tests to xdist workers (and runs none itself)."""
    import sys

    return not os.environ.get("PYTEST_XDIST_WORKER") and any(
        arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in sys.argv[1:])


def isolate_xdist_worker() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    base = os.environ.get("PERFBISECT_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    url = f"{base}_{worker}"
    _ensure_database(url)
    redis_base = _start_redis()
    os.environ["PERFBISECT_TEST_DATABASE_URL"] = url
    os.environ["PERFBISECT_TEST_REDIS_URL"] = f"{redis_base}/15"
    os.environ["PERFBISECT_TEST_REDIS_BASE"] = redis_base
    os.environ["PERFBISECT_TEST_NS"] = f"{os.environ.get('PERFBISECT_TEST_NS', '')}_{worker}"


def group_timed_e2e(items: list) -> None:
    """Under `--dist loadgroup`, the e2e tests that time real trials and recoveries (they start
    servers and workers of their own) run first, in two groups of one worker each, one test
    after another: the fault tests (a step of 40x, decided in any weather) and the rest (bisects
    of the demo's 15-50% steps), so no two demo bisects ever measure each other. Both workers
    then share what is left, the e2e tests marked `untimed` among it. xdist groups by a suffix
    it writes into each node id, which pytest 9.2's node ids do not take (the groups are
    silently ignored: pytest-dev/pytest-xdist#1386), so constraints.txt keeps pytest below 9.2;
    tests/test_suite_layout.py checks the grouping."""
    timed = [item for item in items if item.get_closest_marker("e2e") and not item.get_closest_marker("untimed")]
    for item in timed:
        item.add_marker(pytest.mark.xdist_group("faults" if item.get_closest_marker("faults") else "e2e"))
    first = set(map(id, timed))
    items[:] = timed + [item for item in items if id(item) not in first]
