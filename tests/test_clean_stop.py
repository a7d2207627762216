"""A worker's pool process that leaves at a warm shutdown (Celery's worker_process_shutdown, sent
before billiard's os._exit, which runs no atexit function) stops its fork servers and removes their
directories. The SIGTERM path of a plain process is in tests/kernels/test_launch.py. The worker's
start line says which memory bound applies."""

from __future__ import annotations

import os
import tempfile
import time

import pytest
from celery.signals import worker_process_shutdown

from perfbisect.kernels.harness import launch, procfs
from perfbisect.kernels.harness.contain import forkserver
from perfbisect.workers import tasks  # noqa: F401 - connects the worker's signal receivers

pytestmark = pytest.mark.skipif(not launch.fork_available(), reason="the fork server needs Linux fork")


def test_a_pool_process_leaving_stops_its_fork_servers_and_removes_their_directories(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = launch.server_for(dict(os.environ))
    server_pid = server.hello["pid"]
    assert server.dir.parent == tmp_path and server.dir.is_dir()
    worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)
    assert list(tmp_path.iterdir()) == [] and procfs.process_gone(server_pid)


def test_the_worker_says_which_memory_bound_applies_when_it_starts(tmp_path):
    """The worker's start line (before Celery's banner): this host delegates no cgroup v2, so
    memory is bounded per process only, and it says so with the numbers."""
    # the session's own database and Redis, from the environment: importing tests.conftest as a
    # module would run it a second time (a new database, home and Redis for every later test)
    database_url = os.environ["DATABASE_URL"]
    redis_url = os.environ.get("PERFBISECT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    from tests.e2e_support import perfbisect, service_env, stop, traversable_home

    log = tmp_path / "worker.log"
    env = service_env(traversable_home(), database_url, redis_url, PERFBISECT_SANDBOX_CGROUP_DIR="",
                      TMPDIR=str(tmp_path))
    worker = perfbisect("worker", "--device-class", "cpu", "--no-control", env=env, log=log)
    try:
        deadline = time.monotonic() + 120
        while "memory: " not in log.read_text() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop(worker)
    line = next((line for line in log.read_text().splitlines() if line.startswith("memory: ")), None)
    assert line is not None and line.startswith("memory: bounded per process only ("), log.read_text()[-3000:]
    assert "MiB per process" in line and "/tmp and /dev/shm" in line
    assert not list(tmp_path.glob(forkserver.DIR_PREFIX + "*"))
