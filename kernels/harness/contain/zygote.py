"""A fork server for trials: one interpreter that has imported torch, forking one fresh child
per trial, so a trial skips the interpreter start and the torch import (2-4 s of each trial).

    python -m perfbisect.kernels.harness.contain.zygote --fd N --client-uid UID [--preload MODULE ...]
                                                                  (started by forkserver.ForkServer)

The server imports torch and triton: it never initialises CUDA (a CUDA context does not
survive fork) and imports nothing of the measured repository unless started with --preload
(a server of one revision, for a suite that declares PRELOAD: see preload.py), so every child
starts with a clean module state for the target package and makes its own CUDA context. A child is a new session
(its own process group, killable as a whole), with the trial's environment, working directory,
sys.path and argv; it runs kernels.harness.__main__ and reports its exit code.

Containment (a worker's sandbox starts the server as its unprivileged user with the slot's
resource limits; every child inherits both):
- the listening socket is made and bound by the process that starts the server, which passes
  it as fd N; the server accepts a connection only from that process (SO_PEERCRED: its pid
  and uid), so a trial running as the same user cannot make the server fork for it;
- the server is not dumpable (PR_SET_DUMPABLE 0): a trial of the same uid cannot ptrace it or
  read its memory, and so cannot poison the trials forked after it;
- a child dies with the server (PR_SET_PDEATHSIG) and is a child subreaper, so the orphans of
  its descendants stay in its subtree while it lives;
- the trial's marker (PERFBISECT_SANDBOX, see tree.py) is written into the child's
  own environment block, in the room the server's placeholder value keeps there, so that
  /proc/<pid>/environ of the child and of everything it forks names the trial (a forked
  process shows its initial environment there, not os.environ).

In a sandbox (process.Containment.wrapper) the server is the init process of the slot's PID
namespace: no process in there can stop or kill it (init receives only the signals it handles,
and it handles none), and the process that started it, outside, shows as pid 0. There it keeps
CAP_SYS_ADMIN and CAP_SETPCAP of the slot's user namespace (nothing it executes inherits them):
each child enters the request's view (trialview.py: its own revision's caches only, / and /dev
read-only) and drops every capability before the trial's code runs. A server started with
--view (a revision's, which preloads its code) enters that view itself first, and forks only
trials of that view.

Protocol, one Unix-socket connection per trial: the client sends one byte carrying the log
file's descriptor (SCM_RIGHTS), then one JSON line {argv, cwd, env, sys_path}; the child answers
{"started": true} before running anything (the client reads its pid from the credentials the
kernel attaches, in the client's own PID namespace) and, when done, {"exit": code}. The server
closes the connection when it cannot fork; a child killed before it answers closes it too.
When a trial is over the client sends END alone on a new connection: the server, as init of its
namespace, kills every other process there and empties /tmp and /dev/shm (teardown.py), then
answers {"ended": true}; it does the same before each fork. When that fails it answers
{"ended": false} and quits, and the kernel kills what is left in its namespace.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import signal
import socket
import struct
import sys
import tempfile
import traceback

from perfbisect.kernels.harness import procfs
from perfbisect.kernels.harness.contain import teardown, trialview
from perfbisect.kernels.harness.contain.trialview import TrialView
from perfbisect.kernels.harness.preload import import_preloaded

# What the server imports before forking: the frameworks and the harness itself, never the
# measured repository. Names that are not installed (triton on a CPU box) are skipped.
PRELOAD = ("torch", "numpy", "triton", "perfbisect.kernels.harness.trial")
# Per-process caches of Triton that need no GPU, filled once in the server so that no forked trial
# recomputes them at its first compile (a cache hit included): the hash of Triton's own install
# (triton_key: every compiler source and libtriton.so, hundreds of MB, read and hashed) and the
# ptxas version (a subprocess). Where Triton keeps them varies by version: the names that exist.
JIT_WARMERS = (("triton.runtime.cache", "triton_key"), ("triton.compiler.compiler", "triton_key"),
               ("triton.backends.nvidia.compiler", "get_ptxas_version"))
IDLE_POLL_S = 1.0
MAX_REQUEST_BYTES = 1 << 22
# The environment variable that names the trial a process belongs to (tree.py) and
# the server's own value of it: room for a trial's marker, matching no sandbox slot.
MARKER_NAME = "PERFBISECT_SANDBOX"
MARKER_PLACEHOLDER = "fork-server#" + "_" * 1024
END = b"E"  # the first byte of a request to end the last trial (a fork request's is "L")

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> bool:
    """Linux prctl(2) through libc; False where it is unavailable or refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def preloaded_roots() -> set[str]:
    """Top-level names a repository must not shadow for a forked child to be equivalent to a
    fresh interpreter (the child would see the server's module, not the repository's)."""
    return {name.split(".")[0] for name in PRELOAD}


def _preload(revision_modules: list[str]) -> tuple[list[str], dict[str, str]]:
    """Import the frameworks, then the revision's `revision_modules` (sys.path holds its
    worktree); returns (imported, {module: why it failed}) of the latter's failures."""
    loaded = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except ImportError:
            continue
    revision_loaded, failed = import_preloaded(revision_modules)
    warm_jit()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # pragma: no cover - a bug, not a state
        raise RuntimeError("CUDA was initialised in the fork server; its children could not use it")
    return loaded + revision_loaded, failed


def warm_jit() -> list[str]:
    """Fill JIT_WARMERS' caches where Triton is imported (never CUDA: these read files and run
    ptxas); returns the names called. A failure is the trial's to meet, as it would without this."""
    if "triton" not in sys.modules:
        return []
    called = []
    for module, name in JIT_WARMERS:
        try:
            warmer = getattr(importlib.import_module(module), name, None)
            if callable(warmer) and f"{warmer.__module__}.{name}" not in called:
                warmer()
                called.append(f"{warmer.__module__}.{name}")
        except Exception:  # noqa: BLE001 - an optional speed-up: the trial computes it itself
            continue
    return called


def marker_room() -> tuple[int, int] | None:
    """(address, size) of the placeholder's value inside this process's environment block, the
    memory /proc/<pid>/environ shows; None when the block holds no placeholder."""
    fields = procfs.stat_fields("self")
    try:
        env_start, env_end = int(fields[47]), int(fields[48])  # fields 50 and 51 of proc(5)
    except (TypeError, ValueError, IndexError):
        return None
    if not 0 < env_start < env_end:
        return None
    # read from memory: /proc/self/environ of a non-dumpable process is root's (mode 0400)
    block = ctypes.string_at(env_start, env_end - env_start)
    entry = f"{MARKER_NAME}={MARKER_PLACEHOLDER}\0".encode()
    offset = block.find(entry)
    if offset != 0 and (offset < 0 or block[offset - 1] != 0):
        return None
    value_at = env_start + offset + len(MARKER_NAME) + 1
    return value_at, len(MARKER_PLACEHOLDER)


def write_marker(room: tuple[int, int], marker: str) -> None:
    """Overwrite the placeholder in place with `marker` (NUL-padded); raises ValueError when
    it does not fit."""
    address, size = room
    value = marker.encode()
    if len(value) > size or b"\0" in value:
        raise ValueError(f"marker of {len(value)} bytes does not fit the {size} kept for it")
    ctypes.memmove(address, value.ljust(size, b"\0"), size)


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def peer_of(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process that connected, from the kernel (SO_PEERCRED)."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    return pid, uid


def _read_request(conn: socket.socket) -> tuple[dict, int] | None:
    """The request and the log file descriptor sent with its first byte; None for the request
    to end the last trial (END, sent without a descriptor)."""
    first, fds, _, _ = socket.recv_fds(conn, 1, 1)
    if first == END and not fds:
        return None
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("no log file descriptor with the request")
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk or len(data) > MAX_REQUEST_BYTES:
                raise ConnectionError("client closed before sending a request")
            data += chunk
        return json.loads(data), fds[0]
    except BaseException:
        os.close(fds[0])
        raise


def _become_trial(request: dict, log_fd: int, server: int, room: tuple[int, int] | None,
                  view: TrialView | None) -> None:
    """In the forked child, before any trial code: its own session, death with the server, the
    trial's marker, output, its view of the slot (then no capability), directory, environment
    and sys.path."""
    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:  # the server died before the line above
        os._exit(1)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    marker = request["env"].get(MARKER_NAME)
    if marker is not None:
        if room is None:
            raise RuntimeError("the fork server has no room for the trial's marker")
        write_marker(room, marker)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it; subprocess needs it
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(null)
    os.close(log_fd)
    if view is not None:  # failing, the trial fails: it never runs with the slot's whole view
        trialview.enter(view)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # TMPDIR is the trial's, not the one the server may have cached
    sys.path[:] = request["sys_path"]
    sys.argv[:] = request["argv"]
    importlib.invalidate_caches()
    # dumpable again, like a process that exec'd: the server's memory is behind this fork
    prctl(PR_SET_DUMPABLE, 1)


def _run_child(conn: socket.socket, listener: socket.socket, request: dict, log_fd: int, server: int,
               room: tuple[int, int] | None, view: TrialView | None) -> None:
    """In the forked child: become the trial's process, run the harness, report, exit."""
    code = 1
    try:
        listener.close()
        _send(conn, {"started": True})
        _become_trial(request, log_fd, server, room, view)
        from perfbisect.kernels.harness.__main__ import main
        code = main(request["argv"][1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            _send(conn, {"exit": code})
        finally:
            os._exit(code)


def _serve_one(conn: socket.socket, listener: socket.socket, client: tuple[int, int],
               room: tuple[int, int] | None, fixed: TrialView | None) -> None:
    peer_pid, peer_uid = peer_of(conn)
    # only the process that started this server may ask it to fork (uid -1: any uid, in a
    # sandbox, where that process is outside the namespace and every insider has a pid)
    if peer_pid != client[0] or client[1] not in (-1, peer_uid):
        return
    conn.settimeout(10)
    try:
        received = _read_request(conn)
    except (OSError, ValueError):
        return
    if received is None:
        _end_trials(conn)
        return
    request, log_fd = received
    try:
        view = TrialView.from_json(request.get("view"))
    except (KeyError, TypeError, AttributeError):  # malformed: never forked with the server's whole view
        os.close(log_fd)
        return
    if fixed is not None:  # a revision's server, already in its trials' view: no other view
        if view != fixed:
            os.close(log_fd)
            return
        view = None
    if teardown.is_init() and not teardown.end_trials():  # nothing of an earlier trial meets this one
        os._exit(1)
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError:  # the slot's process limit: the client sees the connection close
        pid = -1
    if pid == 0:
        _run_child(conn, listener, request, log_fd, server, room, view)
    os.close(log_fd)


def _end_trials(conn: socket.socket) -> None:
    """Answer the request to end the last trial: as the namespace's init, kill every other process
    of it and empty /tmp and /dev/shm (teardown.py); {"ended": false} and quit when that could
    not be done (the namespace dies with its init). Outside a namespace: {"ended": null}."""
    ended = teardown.end_trials() if teardown.is_init() else None
    try:
        _send(conn, {"ended": ended})
    except OSError:
        pass
    if ended is False:
        os._exit(1)


def traced() -> bool:
    """True when a debugger is attached to this process (TracerPid in /proc/self/status)."""
    return procfs.status("self").get("TracerPid", "0") != "0"


def serve(listen_fd: int, client_uid: int, preload: list[str] = (), view: TrialView | None = None) -> None:
    # First: from now on nothing of the same uid may ptrace this process or read its memory.
    # Refuse to serve if something attached between exec and this line (see the README).
    prctl(PR_SET_DUMPABLE, 0)
    if traced():
        raise SystemExit("the fork server is being traced: not serving")
    if view is not None:  # a revision's server: its view, and no capability, before its code
        trialview.enter(view)
    elif teardown.is_init():  # capabilities for its trials' views, and for nothing it executes
        trialview.keep_permitted_only()
    client = (os.getppid(), client_uid)
    room = marker_room()
    loaded, failed = _preload(list(preload))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children (and orphans adopted as init) are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: as init, no trial can interrupt it
    listener = socket.socket(fileno=listen_fd)
    listener.settimeout(IDLE_POLL_S)
    print(json.dumps({"ready": True, "pid": os.getpid(), "preloaded": loaded, "preload_failed": failed,
                      "sys_path": sys.path,
                      "marker_room": room[1] if room else 0}), flush=True)
    while os.getppid() == client[0]:  # the worker that started us is gone: stop
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            _serve_one(conn, listener, client, room, view)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perfbisect.kernels.harness.contain.zygote")
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    parser.add_argument("--client-uid", type=int, required=True, help="the uid allowed to connect")
    parser.add_argument("--preload", action="append", default=[], metavar="MODULE",
                        help="a module of the revision to import before forking (repeatable)")
    parser.add_argument("--view", type=json.loads, default=None, help="the view of every trial (trialview.py), JSON")
    args = parser.parse_args(argv)
    serve(args.fd, args.client_uid, args.preload, TrialView.from_json(args.view))


if __name__ == "__main__":
    main()
