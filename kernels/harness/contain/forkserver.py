"""The fork server's client: start a fork server (zygote.py) contained, fork trials from it, end
them. One fresh process per trial, in its own session, its output in a log file.

    server = ForkServer(env, containment)        # python -m ...contain.zygote, under containment
    trial = server.launch(request, log_fd)       # -> ForkedTrial, a Supervised process
    supervise(trial, marker, timeout_s)          # process.py: wait, kill its tree, end it

With a Containment whose `wrapper` is the slot's bwrap command line (bwrap.py) the server starts
inside the slot's namespaces as their init process: its trials are forked in there, and no
process of the sandbox can stop or kill the server (init gets no signal it has no handler for).
The trial's pid in this process's namespace comes with its first message (SO_PASSCRED). When a
trial is over, `ForkedTrial.end` has the server kill everything else in its namespace and empty
/tmp and /dev/shm (teardown.py). Which server serves which trial is kernels/harness/launch.py's.

A fork server's private directory (socket, stderr, HOME) is under the temporary directory, with a
file that names the process that made it. A process killed before it could stop its servers
(SIGKILL, os._exit) leaves the directory; the next process to start a server removes it.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from perfbisect.kernels.harness.contain import tree
from perfbisect.kernels.harness.contain.process import Containment, Supervised, kill_group, popen
from perfbisect.kernels.harness.contain.teardown import TEARDOWN_S
from perfbisect.kernels.harness.contain.trialview import TrialView
from perfbisect.kernels.harness.contain.zygote import END, MARKER_NAME, MARKER_PLACEHOLDER
from perfbisect.kernels.harness import procfs
from perfbisect.kernels.harness.procfs import child_of, process_gone, process_start

SERVER_START_TIMEOUT_S = 120
DIR_PREFIX = "perfbisect-zygote-"
OWNER_FILE = "owner"
STALE_UNOWNED_S = 3600  # a directory without an owner file this old was left by an older version


@dataclass(frozen=True)
class LaunchRequest:
    args: list[str]          # arguments of `python -m perfbisect.kernels.harness`
    cwd: Path
    env: dict[str, str]      # the complete environment of the trial, PYTHONPATH included
    import_dir: Path         # the repository's import root, first on PYTHONPATH
    log: Path
    preload: tuple[str, ...] = ()   # modules of the revision its fork server imports (preload.py)
    revision: str | None = None     # the revision checked out at cwd; no preload without it
    view: TrialView | None = None   # what of its slot it may write (trialview.py); None: all its server may




class ForkedTrial(Supervised):
    """A child of the fork server; its exit code comes back on the request's connection."""

    launcher = "fork-server"
    reap_root = True  # no Popen waits for it: once its server is gone it is this process's to reap

    def __init__(self, conn: socket.socket, pid: int, pending: bytes, server: ForkServer | None = None,
                 preloaded: tuple[str, ...] = ()):
        self.conn, self.pid, self.buffer, self.server = conn, pid, pending, server
        self.server_pid = server.server_pid if server else None
        self.preloaded = preloaded  # the revision's modules it started with, imported by the server
        self.returncode: int | None = None

    def _read(self, timeout_s: float) -> bool:
        """Read what the connection has within `timeout_s`; False when nothing came."""
        if not select.select([self.conn], [], [], max(0.0, timeout_s))[0]:
            return False
        chunk = self.conn.recv(4096)
        if not chunk:  # killed before it could answer
            self.returncode = -signal.SIGKILL
        self.buffer += chunk
        return True

    def poll(self, timeout_s: float) -> int | None:
        """The exit code, waiting up to `timeout_s` for it; None while the child runs."""
        deadline = time.monotonic() + timeout_s
        while self.returncode is None and b"\n" not in self.buffer:
            if not self._read(deadline - time.monotonic()):
                # a descendant that kept the connection open must not hide the child's death
                if process_gone(self.pid) and not self._read(0) and b"\n" not in self.buffer:
                    self.returncode = -signal.SIGKILL
                break
        if self.returncode is None and b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            self.returncode = int(json.loads(line)["exit"])
        return self.returncode

    def close(self) -> None:
        self.conn.close()

    def kill(self) -> None:
        kill_group(self.pid)
        self.close()

    def end(self) -> None:
        """Once the trial is over: nothing it started lives on, nothing it wrote in /tmp or
        /dev/shm stays (ForkServer.end_trials); the connection is closed."""
        try:
            if self.server is not None:
                self.server.end_trials()
        finally:
            self.close()

class ForkServerUnavailable(RuntimeError):
    """The fork server could not start or stopped answering: use a subprocess."""

class ForkServer:
    """One `python -m perfbisect.kernels.harness.contain.zygote` process and its socket. This process
    binds the socket (in a directory only it may list) and hands it to the server; the server
    accepts connections from this process only."""

    def __init__(self, env: dict[str, str], containment: Containment | None = None, preload: tuple[str, ...] = (),
                 view: TrialView | None = None):
        self.containment = containment or Containment()
        self.preload, self.view = preload, view  # a revision's server enters its trials' view itself
        self.trial_pids: list[int] = []  # the trials it forked that may still run
        self.server_pid: int | None = None
        _sweep_once()
        self.dir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
        (self.dir / OWNER_FILE).write_text(f"{os.getpid()} {process_start(os.getpid())} {procfs.pid_namespace()}\n")
        self.socket_path = str(self.dir / "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.socket_path)
            os.chmod(self.socket_path, 0o600)
            listener.listen(16)
            self._start(self._server_env(env), listener)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        finally:
            listener.close()  # the server holds it now
        ready, _, _ = select.select([self.proc.stdout], [], [], SERVER_START_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else b""
        try:
            self.hello = json.loads(line)
        except ValueError:
            self.hello = {}
        if not self.hello.get("ready"):
            said = self._stderr_tail()
            self.stop()
            raise ForkServerUnavailable(f"the fork server did not start: {said or 'it said nothing (torch not importable?)'}")
        # the server's pid as this process sees it: under a wrapper, the wrapper's child
        self.server_pid = child_of(self.proc.pid) if self.containment.wrapper else self.proc.pid

    def _server_env(self, env: dict[str, str]) -> dict[str, str]:
        """The server's own HOME and TMPDIR (a directory of its user inside this server's; in
        a sandbox its private /tmp), and the placeholder its children overwrite with their
        trial's marker."""
        home = self.dir / "home"
        home.mkdir()
        if self.containment.uid is not None:
            os.chown(home, self.containment.uid, self.containment.gid)
            self.dir.chmod(0o711)  # the server's user may reach its HOME, not list the directory
        if self.containment.wrapper:
            home = Path("/tmp")
        return {**env, "HOME": str(home), "TMPDIR": str(home), MARKER_NAME: MARKER_PLACEHOLDER}

    def _start(self, env: dict[str, str], listener: socket.socket) -> None:
        """Start the server from a thread that lives as long as it does: the server dies with
        the thread that started it (PR_SET_PDEATHSIG), not with whichever worker thread first
        needed it."""
        started = threading.Event()
        failure: list[BaseException] = []

        def keep() -> None:
            try:
                # what it says before it is ready (a sandbox that cannot start, an import that
                # fails) is kept for the error; once ready it says nothing
                stderr = open(self.dir / "stderr", "wb")  # noqa: SIM115 - closed below
            except OSError as exc:
                failure.append(exc)
                started.set()
                return
            try:
                # cwd: this private directory (only the socket in it), so the server's own
                # sys.path[0] holds no package that could shadow torch or the harness. In a
                # sandbox this process is outside the server's user namespace: its uid shows as
                # the overflow uid there, and its pid as 0, which only an outsider has.
                client_uid = -1 if self.containment.wrapper else os.geteuid()
                self.proc = popen(
                    [sys.executable, "-m", "perfbisect.kernels.harness.contain.zygote",
                     "--fd", str(listener.fileno()), "--client-uid", str(client_uid),
                     *(arg for name in self.preload for arg in ("--preload", name)),
                     *(("--view", json.dumps(self.view.to_json())) if self.view else ())],
                    self.containment, cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=stderr,
                    pass_fds=(listener.fileno(),))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failure.append(exc)
                return
            finally:
                stderr.close()
                started.set()
            self.proc.wait()

        threading.Thread(target=keep, name="perfbisect-fork-server", daemon=True).start()
        started.wait()
        if failure:
            raise ForkServerUnavailable(f"the fork server did not start: {failure[0]}")

    def _stderr_tail(self, lines: int = 3) -> str:
        try:
            text = (self.dir / "stderr").read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def launch(self, request: LaunchRequest, log_fd: int | None = None) -> ForkedTrial:
        """Fork one trial. Its output goes to `log_fd` (an open file of the caller), else to
        request.log."""
        marker = request.env.get(MARKER_NAME)
        if marker is not None and len(marker.encode()) > self.hello.get("marker_room", 0):
            raise ForkServerUnavailable("the trial's marker does not fit the fork server's placeholder")
        # the import root, then what `python -m` in request.cwd would put first: the cwd, then
        # PYTHONPATH (whose entries after the import root the server already has), then the
        # interpreter's own (the harness puts the import root first either way: __main__.py)
        head = list(dict.fromkeys([str(request.import_dir), str(request.cwd)]))
        sys_path = head + [p for p in self.hello["sys_path"][1:] if p not in head]
        message = {"argv": ["perfbisect.kernels.harness", *request.args], "cwd": str(request.cwd),
                   "env": request.env, "sys_path": sys_path, "view": request.view and request.view.to_json()}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(30)
            conn.connect(self.socket_path)
            # the kernel stamps each message with its sender's pid as this process sees it
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            if log_fd is None:
                with open(request.log, "wb") as log:
                    socket.send_fds(conn, [b"L"], [log.fileno()])
            else:
                socket.send_fds(conn, [b"L"], [log_fd])
            conn.sendall((json.dumps(message) + "\n").encode())
            pid, buffer = _first_message(conn)
        except OSError as exc:
            conn.close()
            raise ForkServerUnavailable(f"fork server: {exc}") from exc
        except ForkServerUnavailable:
            conn.close()
            raise
        conn.settimeout(None)
        _, _, pending = buffer.partition(b"\n")  # the child's "started" line; its exit may follow
        self.trial_pids = [p for p in self.trial_pids if not process_gone(p)] + [pid]
        preloaded = tuple(name for name in self.preload if name in self.hello.get("preloaded", ()))
        return ForkedTrial(conn, pid, pending, self, preloaded)

    def end_trials(self) -> None:
        """Have a server that is its namespace's init (under a wrapper) kill every other process
        there and empty its /tmp and /dev/shm (teardown.py), and wait until it has. A server
        that could not, or did not answer, is stopped: its namespace dies with it."""
        if not self.containment.wrapper or not self.alive():
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(TEARDOWN_S + 10)
                conn.connect(self.socket_path)
                conn.sendall(END)
                answer = b""
                while not answer.endswith(b"\n") and (chunk := conn.recv(4096)):
                    answer += chunk
            ended = json.loads(answer).get("ended") if answer else False
        except (OSError, ValueError):
            ended = False
        if ended is not True:
            self.stop()

    def busy(self) -> bool:
        """True while a trial it forked runs (it dies with its server)."""
        return not all(process_gone(pid) for pid in self.trial_pids)

    def stop(self) -> None:
        kill_group(self.proc.pid)
        self.proc.wait()
        if self.containment.wrapper and self.server_pid:
            # the namespace's init: a zombie only once the kernel has killed all else in there
            tree.reap_adopted_pid(self.server_pid, wait_s=TEARDOWN_S)
        if self.proc.stdout:
            self.proc.stdout.close()
        # what the server's user left in its HOME goes too (rmtree follows no symbolic link)
        shutil.rmtree(self.dir, ignore_errors=True)

def sweep_stale_dirs(root: Path | None = None) -> list[Path]:
    """Remove the fork-server directories of this user under `root` (the temporary directory)
    whose owner process is gone, and those without a readable owner file older than
    STALE_UNOWNED_S.
    A directory made in another PID namespace (a container sharing the temporary directory) is
    left alone: its pid cannot be looked up from here. Returns what it removed."""
    root = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    if process_start(os.getpid()) is None:  # no /proc: no owner can be told alive or gone
        return removed
    for path in root.glob(DIR_PREFIX + "*"):
        try:
            info = path.lstat()
            if not path.is_dir() or path.is_symlink() or info.st_uid != os.geteuid():
                continue
            try:
                pid, started, namespace = (path / OWNER_FILE).read_text().split()
                if namespace != procfs.pid_namespace() or process_start(int(pid)) == started:
                    continue
            except (FileNotFoundError, ValueError):  # being made right now, or by an older version
                if time.time() - info.st_mtime < STALE_UNOWNED_S:
                    continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


_swept = threading.Event()


def _sweep_once() -> None:
    """sweep_stale_dirs, the first time this process starts a fork server."""
    if not _swept.is_set():
        _swept.set()
        sweep_stale_dirs()


def _first_message(conn: socket.socket) -> tuple[int, bytes]:
    """(pid of the forked child, what it sent): the child's first line, sent before any trial
    code runs, carries its credentials; the server itself sends nothing (it closes the
    connection when it could not fork)."""
    pid, buffer = None, b""
    while b"\n" not in buffer:
        chunk, ancillary, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("3i")))
        if not chunk:
            raise ForkServerUnavailable("the fork server closed the connection")
        for level, kind, data in ancillary:
            if pid is None and level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("3i", data[:struct.calcsize("3i")])[0]
        buffer += chunk
    if pid is None:
        raise ForkServerUnavailable("the forked trial's pid did not come with its first message")
    return pid, buffer
