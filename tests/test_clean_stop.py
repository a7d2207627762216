"""A worker's pool process that leaves at a warm shutdown (Celery's worker_process_shutdown, sent
before billiard's os._exit, which runs no atexit function) stops its fork servers and removes their
directories. The SIGTERM path of a plain process is in tests/kernels/test_launch.py."""

from __future__ import annotations

import os
import tempfile

import pytest
from celery.signals import worker_process_shutdown

from perfbisect.kernels.harness import launch
from perfbisect.workers import tasks  # noqa: F401 - connects the worker's signal receivers

pytestmark = pytest.mark.skipif(not launch.fork_available(), reason="the fork server needs Linux fork")


def test_a_pool_process_leaving_stops_its_fork_servers_and_removes_their_directories(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = launch.server_for(dict(os.environ))
    server_pid = server.hello["pid"]
    assert server.dir.parent == tmp_path and server.dir.is_dir()
    worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)
    assert list(tmp_path.iterdir()) == [] and launch.process_gone(server_pid)
