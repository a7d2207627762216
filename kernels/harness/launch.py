"""Starting a trial's process: forked from a fork server that has imported torch (fast), or a
plain `python -m perfbisect.kernels.harness` subprocess (the fallback). Either way one fresh process per
trial, in its own session, its output in a log file.

    process = start_trial(request, launcher="auto")   # -> TrialProcess
    process.wait(timeout_s)                           # exit code; raises TimeoutError
    process.kill()                                    # the whole process group

`request` is a LaunchRequest: the harness arguments, the working directory, the complete
environment of the trial, the sys.path its interpreter would have and the log file. One fork
server serves each distinct server environment (the trial's environment without the keys that
change from trial to trial) and stops with this process.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# Keys that differ between trials of one server and are only read after the import of torch
# (Triton reads its cache directory when it compiles): the server starts without them.
PER_TRIAL_KEYS = ("PYTHONPATH", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
SERVER_START_TIMEOUT_S = 120
LAUNCHERS = ("auto", "fork-server", "subprocess")


@dataclass(frozen=True)
class LaunchRequest:
    args: list[str]          # arguments of `python -m perfbisect.kernels.harness`
    cwd: Path
    env: dict[str, str]      # the complete environment of the trial, PYTHONPATH included
    import_dir: Path         # the repository's import root, first on PYTHONPATH
    log: Path


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # the group is already gone
        pass


class SubprocessTrial:
    """`python -m perfbisect.kernels.harness ...`: a new interpreter imports torch itself."""

    launcher = "subprocess"

    def __init__(self, request: LaunchRequest):
        with open(request.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "perfbisect.kernels.harness", *request.args],
                                         cwd=request.cwd, env=request.env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(str(exc)) from exc

    def kill(self) -> None:
        _kill_group(self.pid)
        self.proc.wait()


class ForkedTrial:
    """A child of the fork server; its exit code comes back on the request's connection."""

    launcher = "fork-server"

    def __init__(self, conn: socket.socket, pid: int, pending: bytes):
        self.conn, self.pid, self.buffer = conn, pid, pending

    def wait(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.conn], [], [], left)[0]:
                raise TimeoutError(f"trial process {self.pid} still running after {timeout_s:g} s")
            chunk = self.conn.recv(4096)
            if not chunk:  # killed before it could answer
                return -signal.SIGKILL
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return int(json.loads(line)["exit"])

    def kill(self) -> None:
        _kill_group(self.pid)
        self.conn.close()


class ForkServerUnavailable(RuntimeError):
    """The fork server could not start or stopped answering: use a subprocess."""


class ForkServer:
    """One `python -m perfbisect.kernels.harness.zygote` process and its socket."""

    def __init__(self, env: dict[str, str]):
        self.dir = Path(tempfile.mkdtemp(prefix="perfbisect-zygote-"))
        self.socket_path = str(self.dir / "socket")
        # cwd: this private directory (only the socket in it), so the server's own sys.path[0]
        # holds no package that could shadow torch or the harness
        self.proc = subprocess.Popen([sys.executable, "-m", "perfbisect.kernels.harness.zygote", self.socket_path],
                                     cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], SERVER_START_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else b""
        try:
            self.hello = json.loads(line)
        except ValueError:
            self.hello = {}
        if not self.hello.get("ready"):
            self.stop()
            raise ForkServerUnavailable("the fork server did not start (torch not importable?)")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def launch(self, request: LaunchRequest) -> ForkedTrial:
        # what `python -m` in request.cwd would put first: the cwd, then PYTHONPATH (whose
        # entries after the import root the server already has), then the interpreter's own
        head = [str(request.cwd), str(request.import_dir)]
        sys_path = head + [p for p in self.hello["sys_path"][1:] if p not in head]
        message = {"argv": ["perfbisect.kernels.harness", *request.args], "cwd": str(request.cwd),
                   "env": request.env, "sys_path": sys_path, "log": str(request.log)}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(30)
            conn.connect(self.socket_path)
            conn.sendall((json.dumps(message) + "\n").encode())
            buffer = b""
            while b"\n" not in buffer:
                chunk = conn.recv(4096)
                if not chunk:
                    raise ForkServerUnavailable("the fork server closed the connection")
                buffer += chunk
        except OSError as exc:
            conn.close()
            raise ForkServerUnavailable(f"fork server: {exc}") from exc
        conn.settimeout(None)
        # the child may have answered before the server: both lines carry their key
        messages, _, rest = buffer.rpartition(b"\n")
        lines = [json.loads(part) for part in messages.split(b"\n") if part]
        pid = next(m["pid"] for m in lines if "pid" in m)
        pending = b"".join(json.dumps(m).encode() + b"\n" for m in lines if "exit" in m) + rest
        return ForkedTrial(conn, pid, pending)

    def stop(self) -> None:
        _kill_group(self.proc.pid)
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        for path in (Path(self.socket_path), self.dir):
            try:
                path.unlink() if path.is_socket() else path.rmdir()
            except OSError:
                pass


_servers: dict[str, ForkServer] = {}
_servers_lock = threading.Lock()


def server_env(request: LaunchRequest) -> dict[str, str]:
    """The environment the fork server starts with: the trial's without the per-trial keys,
    and its PYTHONPATH without the repository's import root (the server never imports it)."""
    base = {k: v for k, v in request.env.items() if k not in PER_TRIAL_KEYS}
    paths = [p for p in request.env.get("PYTHONPATH", "").split(os.pathsep)
             if p and Path(p) != request.import_dir]
    if paths:
        base["PYTHONPATH"] = os.pathsep.join(paths)
    return base


def _server_for(env: dict[str, str]) -> ForkServer:
    key = hashlib.sha256(json.dumps(sorted(env.items())).encode()).hexdigest()
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and not server.alive():
            server.stop()
            server = None
        if server is None:
            server = ForkServer(env)
            _servers[key] = server
        return server


def stop_servers() -> None:
    with _servers_lock:
        for server in _servers.values():
            server.stop()
        _servers.clear()


atexit.register(stop_servers)


def shadows_preloaded(import_dirs: list[Path]) -> bool:
    """True when the repository holds a module the server preloads (it measures torch or
    triton itself): then only a fresh interpreter imports the repository's copy."""
    from perfbisect.kernels.harness.zygote import preloaded_roots

    for directory in import_dirs:
        for root in preloaded_roots() - {"kernels"}:
            if (directory / root).is_dir() or (directory / f"{root}.py").is_file():
                return True
    return False


def fork_available() -> bool:
    return hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and sys.platform.startswith("linux")


def start_trial(request: LaunchRequest, launcher: str = "auto"):
    """Start the trial's process; the fork server when `launcher` allows it and it works,
    else a subprocess. Returns a SubprocessTrial or ForkedTrial."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, not {launcher!r}")
    use_fork = launcher != "subprocess" and fork_available() and not shadows_preloaded(
        [request.cwd, request.import_dir])
    if use_fork:
        try:
            return _server_for(server_env(request)).launch(request)
        except ForkServerUnavailable:
            if launcher == "fork-server":
                raise
    return SubprocessTrial(request)

