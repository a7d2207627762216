"""bench/demo_under_load.py's load generator (issue 23): bounded, in its own process group, and
gone with its burst processes when its run ends or is interrupted (no orphans left loading the
machine)."""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

from bench.demo_under_load import __file__ as SCRIPT
from bench.demo_under_load import group_alive, load, load_summary, stop


def members(pgid: int) -> int:
    """Processes in the group `pgid` (field 5 of /proc/PID/stat, after the command's parentheses)."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            count += int(stat.read_text().rsplit(")", 1)[1].split()[2]) == pgid
        except (OSError, IndexError, ValueError):
            continue
    return count


def wait_for_burst(pgid: int, cores: int) -> None:
    deadline = time.monotonic() + 5
    while members(pgid) < cores + 1:
        assert time.monotonic() < deadline, "no burst process started"
        time.sleep(0.05)


def test_the_load_generator_stops_by_itself_with_its_burst_processes() -> None:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, SCRIPT, "--generate", "--seconds", "2", "--cores", "2", "--mib", "16"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    wait_for_burst(proc.pid, 2)
    out, _ = proc.communicate(timeout=8)
    assert proc.returncode == 0 and time.monotonic() - started < 8
    assert not group_alive(proc.pid)
    assert out.split()[0] in ("cpu", "memory") and "on 2 cores" in out


@pytest.mark.parametrize("leave", [None, KeyboardInterrupt])
def test_leaving_a_run_ends_the_generator_group_mid_burst(tmp_path: Path, leave) -> None:
    started = time.monotonic()
    log = tmp_path / "load.log"
    with pytest.raises(KeyboardInterrupt) if leave else nullcontext():
        with load(600, 2, 16, 1, log) as proc:
            wait_for_burst(proc.pid, 2)
            if leave:
                raise leave
    assert not group_alive(proc.pid) and members(proc.pid) == 0
    assert time.monotonic() - started < 10
    bursts = re.match(r"load: (\d+) cpu bursts [\d.]+ s, (\d+) memory bursts", load_summary(log))
    assert int(bursts[1]) + int(bursts[2]) == 1  # cut short in its first burst


PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
SLOW_TO_DIE = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-S", "-c", "import signal, sys, time\\n"
                          "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(0)))\\n"
                          "print('ready', flush=True)\\ntime.sleep(60)"], stdout=sys.stdout)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the leader goes at once
time.sleep(60)
"""


@contextmanager
def child_subreaper(on: bool) -> Iterator[None]:
    """This process as a child subreaper (prctl), or not, and back to what it was after."""
    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int()
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) == 0
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, was.value, 0, 0, 0)


@pytest.mark.parametrize("subreaper", [False, True], ids=["init reaps", "this process reaps"])
def test_stop_returns_only_once_a_member_slower_to_die_than_its_leader_is_gone(tmp_path: Path, subreaper) -> None:
    """The leader exits on TERM at once; its child takes 0.5 s, then stays in the group as a
    zombie until its new parent reaps it: init (about once a second here), or this process when
    it is a child subreaper, as a test process becomes once it has run a perfbisect worker. stop()
    used to check the group right after the leader went, send KILL and return with the child
    still in the group (5 of 5 runs failed), and never reaped a zombie that came to it: `make
    test` failed both ways."""
    out = tmp_path / "out"
    with child_subreaper(subreaper):
        with out.open("w") as sink:
            proc = subprocess.Popen([sys.executable, "-S", "-c", SLOW_TO_DIE], stdout=sink, start_new_session=True)
        deadline = time.monotonic() + 10
        while "ready" not in out.read_text():
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.02)
        stop(proc)
        assert not group_alive(proc.pid) and members(proc.pid) == 0
