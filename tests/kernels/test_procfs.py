"""The one /proc reader (kernels/harness/procfs.py) on real processes: parent, session, zombie,
start time, a variable of the initial environment, and a process with a space and a parenthesis
in its name."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from perfbisect.kernels.harness import procfs

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")


def test_a_child_is_read_alive_then_a_zombie_then_gone():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             env={"PERFBISECT_PROBE": "v=1 x"}, start_new_session=True)
    try:
        seen = procfs.info(child.pid)
        assert seen == procfs.ProcInfo(pid=child.pid, ppid=os.getpid(), session=child.pid, zombie=False)
        assert seen in procfs.all_processes() and child.pid in procfs.pids()
        assert procfs.environ_value(child.pid, "PERFBISECT_PROBE") == "v=1 x"
        assert procfs.environ_value(child.pid, "PERFBISECT_ABSENT") is None
        started = procfs.process_start(child.pid)
        assert started is not None and started == procfs.process_start(child.pid)
        assert procfs.child_of(os.getpid()) is not None and not procfs.process_gone(child.pid)
    finally:
        child.stdin.close()
    while not procfs.process_gone(child.pid):  # a zombie: exited, not yet waited for
        time.sleep(0.01)
    assert procfs.info(child.pid).zombie
    child.wait()
    assert procfs.info(child.pid) is None and procfs.process_start(child.pid) is None


def test_a_command_name_with_spaces_and_parentheses_is_read_past(tmp_path):
    named = tmp_path / "a ) b (c"  # the kernel takes a process's name from the file it ran
    named.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(named), "30"])
    try:
        assert "a ) b (c" in open(f"/proc/{child.pid}/stat").read()
        assert procfs.info(child.pid) == procfs.ProcInfo(pid=child.pid, ppid=os.getpid(),
                                                         session=os.getsid(0), zombie=False)
    finally:
        child.kill()
        child.wait()
