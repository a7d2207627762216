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

A worker's sandbox (workers/sandbox.py) starts its servers with a Containment: the server then
runs as the slot's user under the slot's resource limits, and every trial it forks inherits
them (`start_contained`); the sandbox waits, polls for a cancel and kills the trial's tree. A
Containment with a `wrapper` (the slot's bwrap command line, workers/namespaces.py) starts the
server inside the slot's namespaces as their init process: its trials are forked in there, and
no process of the sandbox can stop or kill the server (init gets no signal it has no handler
for). The trial's pid in this process's namespace comes with its first message (SO_PASSCRED).
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import resource
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
from dataclasses import dataclass, replace
from pathlib import Path

from perfbisect.kernels.harness.devices import JIT_CACHE_KEYS
from perfbisect.kernels.harness.procfs import child_of, process_gone, process_start
from perfbisect.kernels.harness.teardown import TEARDOWN_S
from perfbisect.kernels.harness.trialview import TrialView
from perfbisect.kernels.harness.zygote import (END, MARKER_NAME, MARKER_PLACEHOLDER, PR_SET_PDEATHSIG,
                                               preloaded_roots, prctl)

# Keys that differ between trials of one server and are only read after the import of torch
# (every JIT cache directory, the revision's: Triton reads its own when it compiles, FlyDSL is
# imported by the trial; HOME and TMPDIR are the slot's): the server starts without them, so
# the trials of every revision share one server.
PER_TRIAL_KEYS = ("PYTHONPATH", *JIT_CACHE_KEYS, "HOME", "TMPDIR", MARKER_NAME)
SERVER_START_TIMEOUT_S = 120
LAUNCHERS = ("auto", "fork-server", "subprocess")
# A fork server's private directory (socket, stderr, HOME) under the temporary directory, and the
# file in it that names the process that made it. A process killed before it could stop its
# servers (SIGKILL, os._exit) leaves the directory; the next process to start a server removes it.
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
        return {**user, "preexec_fn": self.preexec, "umask": self.umask}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # the group is already gone
        pass


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
        code = wait_exit(self.proc, timeout_s)
        if code is None:
            raise TimeoutError(f"the trial (pid {self.pid}) still runs after {timeout_s:g} s")
        return code

    def kill(self) -> None:
        _kill_group(self.pid)
        self.proc.wait()


class ForkedTrial:
    """A child of the fork server; its exit code comes back on the request's connection."""

    launcher = "fork-server"

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

    def wait(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while (code := self.poll(min(0.5, max(0.0, deadline - time.monotonic())))) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"trial process {self.pid} still running after {timeout_s:g} s")
        return code

    def close(self) -> None:
        self.conn.close()

    def kill(self) -> None:
        _kill_group(self.pid)
        self.close()

    def end(self) -> None:
        """Once the trial is over: nothing it started lives on, nothing it wrote in /tmp or
        /dev/shm stays (ForkServer.end_trials)."""
        if self.server is not None:
            self.server.end_trials()


class ForkServerUnavailable(RuntimeError):
    """The fork server could not start or stopped answering: use a subprocess."""


class ForkServer:
    """One `python -m perfbisect.kernels.harness.zygote` process and its socket. This process
    binds the socket (in a directory only it may list) and hands it to the server; the server
    accepts connections from this process only."""

    def __init__(self, env: dict[str, str], containment: Containment | None = None, preload: tuple[str, ...] = (),
                 view: TrialView | None = None):
        self.containment = containment or Containment()
        self.preload, self.view = preload, view  # a revision's server enters its trials' view itself
        self.trial_pids: list[int] = []  # the trials it forked that may still run
        self.server_pid: int | None = None
        _sweep_once()
        _stop_on_sigterm()
        self.dir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
        (self.dir / OWNER_FILE).write_text(f"{os.getpid()} {process_start(os.getpid())} {pid_namespace()}\n")
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
                self.proc = subprocess.Popen(
                    [*self.containment.wrapper, sys.executable, "-m", "perfbisect.kernels.harness.zygote",
                     "--fd", str(listener.fileno()), "--client-uid", str(client_uid),
                     *(arg for name in self.preload for arg in ("--preload", name)),
                     *(("--view", json.dumps(self.view.to_json())) if self.view else ())],
                    cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=stderr, start_new_session=True, pass_fds=(listener.fileno(),),
                    **self.containment.popen_args())
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
        # what `python -m` in request.cwd would put first: the cwd, then PYTHONPATH (whose
        # entries after the import root the server already has), then the interpreter's own
        head = [str(request.cwd), str(request.import_dir)]
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
        _kill_group(self.proc.pid)
        self.proc.wait()
        if self.containment.wrapper and self.server_pid:
            # the namespace's init: a zombie only once the kernel has killed all else in there
            _reap_adopted(self.server_pid, wait_s=TEARDOWN_S)
        if self.proc.stdout:
            self.proc.stdout.close()
        # what the server's user left in its HOME goes too (rmtree follows no symbolic link)
        shutil.rmtree(self.dir, ignore_errors=True)


def pid_namespace() -> str:
    """This process's PID namespace ("pid:[4026531836]"), in which an owner file's pid means
    something; "" where /proc does not say."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


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
                if namespace != pid_namespace() or process_start(int(pid)) == started:
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


def _reap_adopted(pid: int, wait_s: float = 1.0) -> None:
    """Reap `pid`, a wrapper's child killed with it, should it be re-parented to this process
    (a child subreaper): else it would stay a zombie."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # not (yet) this process's child
            if process_gone(pid) and not os.path.exists(f"/proc/{pid}"):
                return
        time.sleep(0.01)


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

