"""wait_exit: a subprocess's exit code as soon as it exits (through a pidfd where Linux has one,
Popen's own polling elsewhere), None while it still runs after the timeout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.kernels.harness.contain.process import wait_exit
from perfbisect.kernels.harness.launch import LaunchRequest, SubprocessTrial


@pytest.fixture(params=["pidfd", "poll"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pidfd" and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open on this platform")
    if request.param == "poll":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    return request.param


def test_an_exit_gives_its_code_and_a_running_process_none(way: str) -> None:
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert wait_exit(running, 0.2) is None
        assert running.returncode is None  # nothing reaped it
    finally:
        running.kill()
        running.wait()
    exiting = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert wait_exit(exiting, 60) == 3
    assert wait_exit(exiting, 0) == 3  # already reaped: the same code again
    assert wait_exit(running, 0) == -9


def test_a_subprocess_trial_gives_its_exit_code(tmp_path: Path, way: str) -> None:
    request = LaunchRequest(args=["--not-an-option"], cwd=tmp_path, env=dict(os.environ), import_dir=tmp_path,
                            log=tmp_path / "log")
    trial = SubprocessTrial(request)
    assert trial.wait(60) == 2  # argparse's exit code for a missing or unknown option
    assert "usage" in (tmp_path / "log").read_text()


def test_a_kill_round_waits_for_the_killed_process_not_its_full_pause(way: str) -> None:
    import time

    from perfbisect.kernels.harness.contain.tree import _await_exit

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    started = time.monotonic()
    _await_exit([child.pid], 60 if way == "pidfd" else 0.05)
    if way == "pidfd":
        assert child.poll() is not None and time.monotonic() - started < 30  # woken by the exit
    child.wait()
    _await_exit([], 0.01)  # nothing to wait on: a short sleep, no error
    _await_exit([child.pid], 0.01)  # reaped already: no pidfd, no error
