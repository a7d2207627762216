"""Starting and waiting for one contained process: the one place repository code is exec'd.

    containment = Containment(uid=200003, gid=1000, limits=((RLIMIT_AS, cap),), wrapper=bwrap_argv)
    process = Subprocess(argv, containment, cwd=cwd, env=env, out=log.fileno())
    stopped = supervise(process, marker, timeout_s, should_stop)   # None, "timeout" or "cancelled"

A Containment says how a process starts: in a cgroup, as a uid, under rlimits, under a command
line (bwrap's, bwrap.py), with a umask, dying with the thread that started it. A `Supervised`
process (a Subprocess here, or a trial forked by a fork server, forkserver.py) is waited for with
a deadline and a stop check, then its whole tree is killed (tree.py) and its end is run (reaped;
for a forked trial, its namespace emptied by the server, teardown.py).
"""
from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from perfbisect.kernels.harness.contain import tree
from perfbisect.kernels.harness.contain.zygote import PR_SET_PDEATHSIG, prctl


@dataclass(frozen=True)
class Containment:
    """How a process of repository code is started: in the cgroup directory `cgroup` (""
    none), as `uid`:`gid` (None: this process's user), under the resource limits `limits`
    ((RLIMIT_*, value) pairs, soft = hard), and killed when the thread that started it dies.
    Hashable: it is part of a fork server's key."""

    uid: int | None = None
    gid: int | None = None
    limits: tuple[tuple[int, int], ...] = ()
    die_with_parent: bool = True
    wrapper: tuple[str, ...] = ()  # a command line the process runs under (bwrap ... --)
    umask: int = -1  # -1: this process's
    cgroup: str = ""

    def preexec(self) -> None:
        """Run in the child (subprocess's preexec_fn): enter the cgroup while it may (as the
        worker's user), then switch user where `cgroup` is set (else subprocess switched it)."""
        if self.cgroup:
            with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as procs:
                procs.write("0")  # this process, and all it will start
            if self.uid is not None:
                os.setgroups([])
                os.setresgid(self.gid, self.gid, self.gid)
                os.setresuid(self.uid, self.uid, self.uid)
        for which, value in self.limits:
            resource.setrlimit(which, (value, value))
        if self.die_with_parent:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def popen_args(self) -> dict:
        switch = self.uid is not None and not self.cgroup  # else preexec switches, after entering the cgroup
        user = {"user": self.uid, "group": self.gid, "extra_groups": []} if switch else {}
        needs_preexec = bool(self.cgroup or self.limits or self.die_with_parent)
        return {**user, "umask": self.umask, **({"preexec_fn": self.preexec} if needs_preexec else {})}


def popen(argv: list[str], containment: Containment, *, cwd, env: dict[str, str], stdout=None,
          stderr=subprocess.STDOUT, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """Start `argv` under `containment` (its wrapper first) in a session of its own, stdin from
    /dev/null. The one Popen of repository code, the fork server and sandbox probes."""
    return subprocess.Popen([*containment.wrapper, *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=stdout, stderr=stderr, start_new_session=True, pass_fds=pass_fds,
                            **containment.popen_args())


def run_captured(argv: list[str], containment: Containment, *, cwd, env: dict[str, str] | None,
                 timeout_s: float) -> tuple[int | None, str]:
    """Run `argv` contained to its end, at most `timeout_s`: (exit code, None when it was
    killed at the deadline; its stderr). Its tree, bwrap's children included, is killed and
    reaped afterwards. Raises OSError when it cannot start."""
    proc = popen(argv, containment, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        code = None
    tree.kill_tree(proc.pid, marker="\0")  # reap bwrap's own children, adopted by this subreaper
    return code, stderr.decode(errors="replace")


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """`proc`'s exit code, waiting up to `timeout_s` for it; None while it runs. Woken by the exit
    itself through a pidfd (Linux 5.3+), where Popen.wait(timeout) polls with sleeps that grow to
    50 ms and so notices a 40 ms build about 20 ms late; elsewhere that poll."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        pidfd = os.pidfd_open(proc.pid)  # not reaped yet (poll() said so): the pid is still proc's
    except (AttributeError, OSError):
        try:
            return proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return None
    try:
        select.select([pidfd], [], [], max(0.0, timeout_s))
    finally:
        os.close(pidfd)
    return proc.poll()


class Supervised:
    """A started process the supervisor waits for: `poll(timeout)` gives its exit code (None
    while it runs), `kill()` kills its process group, `end()` is what follows its tree's death."""

    pid: int
    returncode: int | None = None
    reap_root = False  # the caller reaps it (tree.kill_tree reap_root)

    def poll(self, timeout_s: float) -> int | None:
        raise NotImplementedError

    def wait(self, timeout_s: float) -> int:
        """The exit code; raises TimeoutError when it still runs after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while (code := self.poll(min(0.5, max(0.0, deadline - time.monotonic())))) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout_s:g} s")
        return code

    def kill(self) -> None:
        kill_group(self.pid)

    def end(self) -> None:
        """After its tree was killed: reap what is left."""


class Subprocess(Supervised):
    """`argv` started under `containment`, its output (stdout and stderr) to the descriptor `out`."""

    def __init__(self, argv: list[str], containment: Containment, *, cwd, env: dict[str, str], out: int,
                 marker: str = ""):
        self.marker = marker
        self.proc = popen(argv, containment, cwd=cwd, env=env, stdout=out)
        self.pid = self.proc.pid

    def poll(self, timeout_s: float) -> int | None:
        self.returncode = wait_exit(self.proc, timeout_s)
        return self.returncode

    def kill(self) -> None:
        super().kill()
        self.proc.wait()

    def end(self) -> None:
        self.proc.wait()
        if self.marker:  # a wrapper's child, killed with it, is adopted by this subreaper only now
            tree.kill_tree(self.pid, self.marker)
        self.returncode = self.proc.returncode


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads (a process started in a session of its own)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # the group is already gone
        pass


def wait_until(poll: Callable[[float], int | None], deadline: float,
               should_stop: Callable[[], bool] | None) -> str | None:
    """Wait until `poll(timeout)` gives an exit code (None), the deadline ("timeout") or
    `should_stop` ("cancelled"), checking the last two about every half second."""
    while True:
        if poll(max(0.0, min(0.5, deadline - time.monotonic()))) is not None:
            return None
        if time.monotonic() >= deadline:
            return "timeout"
        if should_stop is not None and should_stop():
            return "cancelled"


def supervise(process: Supervised, marker: str, timeout_s: float,
              should_stop: Callable[[], bool] | None = None) -> str | None:
    """Wait for `process` with a deadline and a stop check polled about every half second, then
    kill its whole tree (those carrying `marker`, setsid'd ones included), also after a clean
    exit: nothing outlives it. Returns None (it exited: process.returncode), "timeout" or
    "cancelled"."""
    try:
        return wait_until(process.poll, time.monotonic() + timeout_s, should_stop)
    finally:
        tree.kill_tree(process.pid, marker, reap_root=process.reap_root)
        process.end()
