"""Starting a trial's process: forked from a fork server that has imported torch (fast), or a
plain `python -m perfbisect.kernels.harness` subprocess (the fallback). Either way one fresh process per
trial, in its own session, its output in a log file.

    process = start_trial(request, launcher="auto")   # -> TrialProcess
    process.wait(timeout_s)                           # exit code; raises TimeoutError
    process.kill()                                    # the whole process group

`request` is a LaunchRequest: the harness arguments, the working directory, the complete
environment of the trial, the sys.path its interpreter would have and the log file. One fork
server serves each distinct (containment, server environment) pair, the server environment
being the trial's without the keys that change from trial to trial; it stops with this process.
A trial whose suite declares modules to preload (`request.preload`, see preload.py) is forked
from a server of its revision alone that has imported them from the revision's worktree; a
server of another revision of the same containment stops once none of its trials runs.

How a process starts contained, is waited for and killed is the containment package's
(kernels/harness/contain/: the fork server's client and server, bwrap's command line, the
process tree); this module only picks the server for a trial. A worker's sandbox
(workers/sandbox.py) starts its servers with a Containment (`start_contained`): the server then
runs as the slot's user under the slot's limits and namespaces, and every trial it forks
inherits them.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import socket
import sys
import threading
from dataclasses import replace
from pathlib import Path

from perfbisect.kernels.harness.contain.forkserver import ForkedTrial, ForkServer, ForkServerUnavailable, LaunchRequest
from perfbisect.kernels.harness.contain.process import Containment, Subprocess
from perfbisect.kernels.harness.contain.zygote import MARKER_NAME, preloaded_roots
from perfbisect.kernels.harness.devices import JIT_CACHE_KEYS

__all__ = ["ForkServerUnavailable", "LaunchRequest", "fork_available", "forkable", "start_contained", "start_trial",
           "stop_servers"]

# Keys that differ between trials of one server and are only read after the import of torch
# (every JIT cache directory, the revision's: Triton reads its own when it compiles, FlyDSL is
# imported by the trial; HOME and TMPDIR are the slot's): the server starts without them, so
# the trials of every revision share one server.
PER_TRIAL_KEYS = ("PYTHONPATH", *JIT_CACHE_KEYS, "HOME", "TMPDIR", MARKER_NAME)
LAUNCHERS = ("auto", "fork-server", "subprocess")


class SubprocessTrial(Subprocess):
    """`python -m perfbisect.kernels.harness ...`: a new interpreter imports torch itself."""

    launcher = "subprocess"

    def __init__(self, request: LaunchRequest):
        with open(request.log, "wb") as log:
            super().__init__([sys.executable, "-m", "perfbisect.kernels.harness", *request.args],
                             Containment(die_with_parent=False), cwd=request.cwd, env=request.env, out=log.fileno())


_servers: dict[tuple, ForkServer] = {}
_servers_lock = threading.Lock()


# keys of revision servers (see _server_of) that could not start: not tried again
_failed_revision_servers: set[tuple] = set()


def server_env(request: LaunchRequest) -> dict[str, str]:
    """The environment the fork server starts with: the trial's without the per-trial keys,
    and its PYTHONPATH without the repository's import root (the server never imports it),
    except for a server that preloads the revision's modules: its PYTHONPATH starts with the
    trial's directory and import root, as `python -m` there would."""
    base = {k: v for k, v in request.env.items() if k not in PER_TRIAL_KEYS}
    paths = [p for p in request.env.get("PYTHONPATH", "").split(os.pathsep)
             if p and Path(p) != request.import_dir]
    if preloads(request):
        paths = [str(request.cwd), str(request.import_dir), *paths]
    if paths:
        base["PYTHONPATH"] = os.pathsep.join(paths)
    return base


def preloads(request: LaunchRequest) -> bool:
    """Whether the trial goes to a server of its revision that preloads its modules."""
    return bool(request.preload) and request.revision is not None


def _env_digest(env: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(env.items())).encode()).hexdigest()


def server_for(env: dict[str, str], containment: Containment | None = None) -> ForkServer:
    """The running fork server of (containment, env), started when there is none."""
    key = (containment, _env_digest(env))
    with _servers_lock:
        return _running(key, lambda: ForkServer(env, containment))


def _running(key: tuple, start) -> ForkServer:
    """The live server under `key`, else a new one from `start()`; the caller holds _servers_lock."""
    server = _servers.get(key)
    if server is not None and not server.alive():
        server.stop()
        server = None
    if server is None:
        _stop_on_sigterm()
        server = start()
        _servers[key] = server
    return server


def _retire_revision_servers(containment: Containment | None, keep: tuple) -> None:
    """Stop the idle revision servers of `containment` but `keep` (each holds its revision's
    modules in memory); the caller holds _servers_lock."""
    for key in [k for k in _servers if k[0] == containment and k[1] == "revision" and k != keep]:
        if not _servers[key].busy():
            _servers.pop(key).stop()


def _server_of(request: LaunchRequest, containment: Containment | None = None) -> ForkServer:
    """The server that forks `request`: its revision's, preloading its modules, when it asks
    for that and such a server starts; else the shared one of its containment and env."""
    env = server_env(request)
    if preloads(request):
        identity = (request.revision, request.preload, request.view, _env_digest(env))
        key = (containment, "revision", identity)
        with _servers_lock:
            if key not in _failed_revision_servers:
                try:
                    server = _running(key, lambda: ForkServer(env, containment, request.preload, request.view))
                    _retire_revision_servers(containment, keep=key)
                    return server
                except ForkServerUnavailable:
                    _failed_revision_servers.add(key)
        env = server_env(replace(request, preload=()))
    return server_for(env, containment)


def stop_servers(wait_s: float = -1) -> None:
    """Stop every fork server of this process and remove their directories; `wait_s`: how long
    to wait for another thread using them (-1: as long as it takes)."""
    if not _servers_lock.acquire(timeout=wait_s):
        return
    try:
        for server in _servers.values():
            server.stop()
        _servers.clear()
        _failed_revision_servers.clear()
    finally:
        _servers_lock.release()


atexit.register(stop_servers)


def _stop_then_die(signum: int, _frame) -> None:
    """SIGTERM in a process nobody else handles it for: stop the fork servers (their
    directories go), then die of the signal as before."""
    stop_servers(wait_s=5)  # the signal may have interrupted this very thread holding the lock
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _stop_on_sigterm() -> None:
    """A process killed by SIGTERM runs no atexit function: where SIGTERM has its default action
    (a Celery pool process, a plain script), stop the servers first. A process that handles
    SIGTERM itself (uvicorn, Celery's main process) exits normally and atexit stops them."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _stop_then_die)


def _stop_at_fork_in_child() -> None:
    _servers.clear()  # a forked worker (a Celery pool process) starts its own servers


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_stop_at_fork_in_child)


def shadows_preloaded(import_dirs: list[Path]) -> bool:
    """True when the repository holds a module the server preloads (it measures torch or
    triton itself): then only a fresh interpreter imports the repository's copy."""
    for directory in import_dirs:
        for root in preloaded_roots() - {"kernels"}:
            if (directory / root).is_dir() or (directory / f"{root}.py").is_file():
                return True
    return False


def fork_available() -> bool:
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and sys.platform.startswith("linux")


def forkable(request: LaunchRequest) -> bool:
    return fork_available() and not shadows_preloaded([request.cwd, request.import_dir])


def start_contained(request: LaunchRequest, containment: Containment, log_fd: int) -> ForkedTrial:
    """Fork the trial from the server of `containment` (started when needed), its output to
    `log_fd`. Raises ForkServerUnavailable when that cannot be done: run a subprocess."""
    if not forkable(request):
        raise ForkServerUnavailable("fork is unavailable or the repository shadows a preloaded package")
    return _server_of(request, containment).launch(request, log_fd)


def start_trial(request: LaunchRequest, launcher: str = "auto"):
    """Start the trial's process; the fork server when `launcher` allows it and it works,
    else a subprocess. Returns a SubprocessTrial or ForkedTrial."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, not {launcher!r}")
    if launcher != "subprocess" and forkable(request):
        try:
            return _server_of(request).launch(request)
        except ForkServerUnavailable:
            if launcher == "fork-server":
                raise
    return SubprocessTrial(request)

