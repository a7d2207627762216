"""The end of a trial inside its slot's namespaces: every other process of the namespace killed,
/tmp and /dev/shm emptied, the namespace's System V IPC objects removed. Run by the fork server
(zygote.py) as the init of the slot's PID namespace, after each trial (the worker asks and waits)
and before each fork, so no process and no file passes from one trial to the next.

Why no process can outrun it: kill(-1, SIGKILL) from a namespace's init signals every other process
of the namespace in one pass under the kernel's task list lock, and a process forking at that
moment has the fatal signal pending, so its fork fails: no process can appear after the pass. A
re-forking chain whose parents exit at once (each pid lives for microseconds, too short for a walk
of /proc) dies in that one pass. The server then waits until its namespace's /proc shows no process
but itself (the kernel reaps the server's children: it ignores SIGCHLD).

Why the files: every trial of a slot is forked by the same server and so shares the private tmpfs
/tmp and /dev/shm that bubblewrap made for it. Emptied between trials, a trial finds nothing that
another planted there. Only the mount points bubblewrap made there (binds of host paths that lie
under /tmp) stay, with the directories above them; everything else is removed through directory
descriptors, never following a symbolic link. Nothing is alive to race it.

Bounded: when this cannot be done within TEARDOWN_S, or a tree is deeper than MAX_DEPTH, it says
so (False) and the server quits: as init, its exit makes the kernel kill everything left in its
namespace, and the tmpfs goes with the namespace's last process; the worker then starts a new
server. Only the standard library: kernels/ imports no service code.
"""
from __future__ import annotations

import ctypes
import errno
import os
import signal
import stat
import time

from perfbisect.kernels.harness import procfs

TEARDOWN_S = 30.0
MAX_DEPTH = 256
EMPTIED = ("/tmp", "/dev/shm")
IPC_RMID = 0
# /proc/sysvipc file -> the libc call that removes one object by its id
IPC_KINDS = {"shm": "shmctl", "sem": "semctl", "msg": "msgctl"}


def is_init() -> bool:
    """True in the init process of a PID namespace (a fork server started as bwrap's --as-pid-1)."""
    return os.getpid() == 1


def others_alive() -> bool:
    """Whether /proc (this namespace's) lists a process besides this one."""
    return any(pid != os.getpid() for pid in procfs.pids())


def end_processes(deadline: float) -> bool:
    """SIGKILL every other process of this PID namespace (this process is its init) until none is
    left; False when some still lived at `deadline` (one stuck in the kernel)."""
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:  # nothing left to signal
            pass
        if not others_alive():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)


def _remove_entry(parent: int, name: str, dev: int, depth: int, deadline: float) -> bool:
    """Remove `name` in the directory open at `parent`: a file, link, socket or node at once, a
    directory of this filesystem once emptied; a mount point (another device) stays."""
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if info.st_dev != dev:
        return True
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
        return True
    if depth >= MAX_DEPTH:
        return False
    os.chmod(name, 0o700, dir_fd=parent)  # one the trial made unreadable or unwritable (its own)
    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        if not _empty(child, dev, depth + 1, deadline):
            return False
    finally:
        os.close(child)
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError as exc:  # it holds a mount point: it stays, emptied
        if exc.errno not in (errno.ENOTEMPTY, errno.EBUSY):
            raise
    return True


def _empty(directory: int, dev: int, depth: int, deadline: float) -> bool:
    """Remove everything under the directory open at `directory` that lies on device `dev`."""
    with os.scandir(directory) as entries:
        names = [entry.name for entry in entries]
    for name in names:
        if time.monotonic() > deadline or not _remove_entry(directory, name, dev, depth, deadline):
            return False
    return True


def empty(path: str, deadline: float) -> bool:
    """Empty the tmpfs at `path` (mount points under it stay); True when done, or it is absent;
    False when it cannot be (a trial made /tmp itself unreadable, say: then the server quits)."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        return _empty(top, os.fstat(top).st_dev, 0, deadline)
    except OSError:
        return False
    finally:
        os.close(top)


def remove_ipc() -> bool:
    """Remove every System V shared memory segment, semaphore set and message queue of this IPC
    namespace (the slot's: bwrap --unshare-ipc), which would otherwise outlive their trial."""
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, call in IPC_KINDS.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                ids = [int(line.split()[1]) for line in table.readlines()[1:] if line.strip()]
        except (OSError, ValueError, IndexError):
            continue
        remove = getattr(libc, call)
        for ident in ids:
            removed = remove(ident, 0, IPC_RMID) if kind == "sem" else remove(ident, IPC_RMID, None)
            if removed != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.EIDRM):
                return False
    return True


def end_trials(timeout_s: float = TEARDOWN_S) -> bool:
    """Kill every other process of this namespace, then empty /tmp and /dev/shm and remove its
    IPC objects; False when that could not all be done within `timeout_s` (then quit)."""
    deadline = time.monotonic() + timeout_s
    return end_processes(deadline) and all(empty(path, deadline) for path in EMPTIED) and remove_ipc()
