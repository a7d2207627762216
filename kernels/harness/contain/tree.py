"""Process trees of untrusted code: find and kill everything a build or a trial started, including
processes that left its process group (`setsid`) and were orphaned.

The worker process makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER): an orphan of a
trial is re-parented to the worker, not to init, so it stays among the worker's descendants and
can be found by walking /proc. Every process of a trial carries the trial's marker in its
environment (inherited across fork and exec unless a program clears it on purpose) and, unless it
called setsid, the session of the trial's root. A trial forked from a fork server has the marker
written into its environment block (zygote.py) and is a child subreaper, so its orphans stay
among its descendants while it lives. /proc is read through kernels/harness/procfs.py. Linux
only; elsewhere these are no-ops.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing.popen_fork
import os
import select
import signal
import subprocess
import time

from perfbisect.kernels.harness.contain.zygote import MARKER_NAME, PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, prctl
from perfbisect.kernels.harness.procfs import ProcInfo, all_processes, environ_value, stat_fields

log = logging.getLogger(__name__)

MARKER = MARKER_NAME  # PERFBISECT_SANDBOX


def harden_worker_process() -> None:
    """Called once in every process that runs untrusted code: become the subreaper of its
    orphans, and non-dumpable, so a child of the same uid cannot read this process's
    /proc/<pid>/environ (the service's secrets) or ptrace it."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_DUMPABLE, 0)


def marker_of(pid: int) -> str | None:
    return environ_value(pid, MARKER)


def descendants(of: int, processes: list[ProcInfo]) -> list[ProcInfo]:
    children: dict[int, list[ProcInfo]] = {}
    for info in processes:
        children.setdefault(info.ppid, []).append(info)
    found, todo = [], [of]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def _belongs(info: ProcInfo, marker: str, root_pid: int, under_root: set[int]) -> bool:
    """A descendant of the worker is the trial's when it descends from the trial's root, is in
    the trial's session or carries its marker. git and other children of the worker itself
    share the worker's session and carry no marker, so they are never touched; neither is a
    fork server (its own session, a placeholder marker), only the trial it forked."""
    if info.session == root_pid or info.pid in under_root:
        return True
    found = marker_of(info.pid)
    return found is not None and found.startswith(marker)


def kill_tree(root_pid: int, marker: str, rounds: int = 50, reap_root: bool = False) -> int:
    """SIGKILL every process of the trial rooted at `root_pid` until none is left (a process
    may fork while its siblings are killed); reap the orphans re-parented to this worker, the
    root too when `reap_root` (a forked trial whose fork server died: no Popen waits for it).
    Returns how many processes were killed."""
    me, killed = os.getpid(), 0
    known: set[int] = set()  # a dead process shows no environment: remember whom we killed
    for _ in range(rounds):
        processes = all_processes()
        under_root = {root_pid} | {p.pid for p in descendants(root_pid, processes)}
        victims = [p for p in descendants(me, processes)
                   if p.pid in known or _belongs(p, marker, root_pid, under_root)]
        known |= {p.pid for p in victims}
        live = [p for p in victims if not p.zombie]
        killed += _sigkill(live)
        # A subprocess root is the caller's Popen, which reaps it; orphans re-parented here are reaped now.
        _reap(p.pid for p in victims if p.ppid == me and (reap_root or p.pid != root_pid))
        # a dead process whose parent is dying too (a forked trial's root adopts its orphans) is
        # re-parented here only once that parent is gone: wait for it, then reap it
        dying = {p.pid for p in victims}
        if not live and not any(p.zombie and p.ppid in dying for p in victims):
            return killed
        _await_exit([p.pid for p in live], 0.02)
    log.warning("processes of sandbox %s survived %d kill rounds", marker, rounds)
    return killed


def _await_exit(pids: list[int], timeout_s: float) -> None:
    """Wait until one of `pids` exits, at most `timeout_s` (through pidfds, Linux 5.3+: the next
    round starts when a killed process is gone, not a fixed 20 ms later; else, or with none
    given, sleep). A process killed with SIGKILL exits within microseconds; the adoption of its
    children by this subreaper follows its exit."""
    fds = []
    try:
        for pid in pids if hasattr(os, "pidfd_open") else ():
            try:
                fds.append(os.pidfd_open(pid))
            except OSError:  # gone already
                pass
        if fds:
            select.select(fds, [], [], timeout_s)
        else:
            time.sleep(timeout_s)
    finally:
        for fd in fds:
            os.close(fd)


def _sigkill(processes) -> int:
    """SIGKILL each process; how many were still there to kill."""
    killed = 0
    for info in processes:
        try:
            os.kill(info.pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def kill_marked(marker: str) -> int:
    """SIGKILL every process on this host that carries `marker` (the janitor's sweep after a
    worker died: its orphans were re-parented to init and only the marker finds them)."""
    me = os.getpid()
    return _sigkill(info for info in all_processes()
                    if info.pid != me and not info.zombie and (marker_of(info.pid) or "").startswith(marker))


_POPENS = (subprocess.Popen, multiprocessing.popen_fork.Popen)


def reap_adopted() -> None:
    """Reap the zombies re-parented to this process, a child subreaper, that nothing here waits
    for: an orphan that exited by itself outside any trial's tree (`git gc --auto` detaches from
    the git that a fetch runs; a helper's background job) would otherwise stay a zombie for as
    long as the worker lives, one pid each. A child that a Popen or a multiprocessing Process of
    this process will wait for is left to it (reaping it here would lose its exit status)."""
    me = os.getpid()
    zombies = [p.pid for p in all_processes() if p.ppid == me and p.zombie]
    if not zombies:
        return
    # issubclass of the type: isinstance would read each object's __class__, which some
    # libraries' deprecated aliases answer with a warning
    waited = {o.pid for o in gc.get_objects() if issubclass(type(o), _POPENS) and o.returncode is None}
    _reap(pid for pid in zombies if pid not in waited)


def _reap(pids) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def reap_adopted_pid(pid: int, wait_s: float = 1.0) -> None:
    """Reap `pid`, a wrapper's child killed with it, should it be re-parented to this process
    (a child subreaper) within `wait_s`: else it would stay a zombie."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # not (yet) this process's child
            if stat_fields(pid) is None:  # gone, not even a zombie
                return
        time.sleep(0.01)
