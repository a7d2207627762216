"""Trials forked from a contained fork server, with real processes: the forked trial runs as the
sandbox user under the slot's limits (inherited from the server, one server per containment),
the server forks only for the worker that started it and cannot be ptraced by a trial, and a
cancelled or timed-out forked trial leaves nothing behind, not even a grandchild that called
setsid or an orphan forked without exec.

The tests as the sandbox user (nobody) need root and an interpreter nobody can run: a virtual
environment whose base interpreter lives under /root (0700) skips them, naming why; a venv made
from /usr/bin/python3 with the project's site-packages added runs them."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from perfbisect.kernels.harness import launch, procfs
from perfbisect.kernels.harness.contain import forkserver
from perfbisect.kernels.harness.contain import tree as proctree
from perfbisect.kernels.harness.phases import PHASES
from perfbisect.kernels.harness.result import validate_result
from perfbisect.kernels.harness.runner import HARNESS_ROOT, run_harness
from perfbisect.service.settings import get_settings
from perfbisect.workers import sandbox, slotpolicy
from tests.kernels.conftest import CUSTOM_SUITE, write_files

pytestmark = pytest.mark.skipif(not launch.fork_available(), reason="the fork server needs Linux fork")

PROBE = """
    import ctypes
    import json
    import os
    import resource
    import subprocess
    import time


    def _pdeathsig():
        value = ctypes.c_int()
        ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
        return value.value


    def _server_environ():
        try:
            with open(f"/proc/{os.getppid()}/environ", "rb") as environ:
                environ.read()
            return "readable"
        except OSError as exc:
            return type(exc).__name__


    def _own_marker():
        with open("/proc/self/environ", "rb") as environ:
            for entry in environ.read().split(b"\\0"):
                if entry.startswith(b"PERFBISECT_SANDBOX="):
                    return entry.split(b"=", 1)[1].decode()


    def _write(path, value):
        with open(path + ".partial", "w") as out:
            json.dump(value, out)
        os.replace(path + ".partial", path)


    def _escape_and_hang(out):
        escaped = subprocess.Popen(["setsid", "sleep", "300"]).pid      # exec'd, its own session
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:                                                 # forked, never exec'd:
            os.setsid()                                                 # its own session, and an
            orphan = os.fork()                                          # orphan once `middle` exits
            if orphan == 0:
                time.sleep(300)
                os._exit(0)
            os.write(write_end, str(orphan).encode())
            os._exit(0)
        os.waitpid(middle, 0)
        _write(out, {"pids": [os.getpid(), escaped, int(os.read(read_end, 32))]})
        time.sleep(300)


    def probe(x, y):
        out = os.environ["PROBE_OUT"]
        if os.environ.get("PROBE_MODE") == "hang":
            _escape_and_hang(out)
        limits = {name: resource.getrlimit(getattr(resource, name))[0]
                  for name in ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_CORE")}
        _write(out, {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(), "ppid": os.getppid(),
                     "limits": limits, "pdeathsig": _pdeathsig(), "server_environ": _server_environ(),
                     "marker": _own_marker(), "home": os.environ["HOME"]})
        return x * (1 - y * y)
"""
POLICY = {"min_samples": 3, "max_samples": 3, "max_time_s": 0.05, "rel_noise": 0.5, "warmup": 0}
SPEC = {"cases": [{"suite": "file:bench/tanh_bwd.py", "target": "probekern.ops:probe", "params": {"N": 1024}}],
        "device": "cpu", "policy": POLICY, "seed": 7}


def _nobody_can_run_the_harness() -> bool:
    nobody = slotpolicy.lookup_user("nobody")
    try:
        done = subprocess.run([sys.executable, "-c", "import perfbisect.kernels.harness.contain.zygote"], cwd="/",
                              user=nobody.uid, group=nobody.gid, extra_groups=[], capture_output=True, timeout=120)
    except OSError:
        return False
    return done.returncode == 0


AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@pytest.fixture
def nobody() -> sandbox.SandboxUser:
    if not _nobody_can_run_the_harness():
        pytest.skip(f"nobody cannot run {sys.executable} and the harness (e.g. an interpreter under /root)")
    return slotpolicy.lookup_user("nobody")


@pytest.fixture(autouse=True)
def without_namespaces(monkeypatch):
    """These tests check the containment that holds with or without namespaces (the slot's uid
    and limits, the server's protocol and peer check, the tree kill) from pids they can see;
    tests/test_hostile.py checks what the namespaces add."""
    monkeypatch.setattr(get_settings(), "sandbox_namespaces", "off")


@pytest.fixture
def shared_sandbox(monkeypatch):
    """Slots in a directory the sandbox user can traverse (pytest's tmp_path is root-only)."""
    shared = Path(tempfile.mkdtemp(prefix="perfbisect-forksrv-"))
    shared.chmod(0o755)
    monkeypatch.setattr(get_settings(), "sandbox_dir", shared)
    yield shared
    launch.stop_servers()
    shutil.rmtree(shared, ignore_errors=True)


def _trial_in(box: sandbox.Slot, memory, mode: str = "probe", timeout_s: float = 120, should_stop=None,
              fork="auto", files: dict | None = None) -> tuple[dict, Path]:
    write_files(box.worktree, {"bench/tanh_bwd.py": CUSTOM_SUITE, "src/probekern/__init__.py": "",
                               "src/probekern/ops.py": PROBE, **(files or {})})
    box.give(box.worktree)
    out = box.tmp / f"{mode}.json"
    result = run_harness(SPEC, box.worktree, import_root="src", env={"PROBE_OUT": str(out), "PROBE_MODE": mode},
                         timeout_s=timeout_s, base_env=box.env({}), scratch_root=box.scratch,
                         launch=box.launcher(memory, should_stop, fork=fork))
    return result, out


def _cpu_and_gpu_trials(user: sandbox.SandboxUser | None, monkeypatch) -> dict[str, dict]:
    """One forked trial with a CPU trial's memory cap and one with a GPU trial's: what each saw."""
    settings = get_settings()
    monkeypatch.setattr(settings, "trial_memory_mb", 24576)
    monkeypatch.setattr(settings, "max_file_mb", 512)
    seen = {}
    for memory in ("as", "data"):
        with sandbox.slot(user=user) as box:
            box.worktree.mkdir()
            result, out = _trial_in(box, memory)
            assert result["status"] == "ok", result
            assert result["launcher"] == "sandbox-fork-server"
            seen[memory] = {**json.loads(out.read_text()), "slot_marker": box.marker, "slot_home": str(box.home)}
        assert seen[memory]["ppid"] != os.getpid()  # forked from a server, which lives on
        assert not procfs.process_gone(seen[memory]["ppid"])
    return seen


def test_a_forked_trial_inherits_the_slot_limits_from_its_server(shared_sandbox, monkeypatch):
    seen = _cpu_and_gpu_trials(None, monkeypatch)
    for memory, trial in seen.items():
        capped, other = ("RLIMIT_AS", "RLIMIT_DATA") if memory == "as" else ("RLIMIT_DATA", "RLIMIT_AS")
        # the slot's 24 GiB budget less its /tmp and /dev/shm (1 GiB each)
        assert trial["limits"][capped] == (24576 - 2 * 1024) * 2**20 and trial["limits"][other] == resource.RLIM_INFINITY
        assert trial["limits"]["RLIMIT_FSIZE"] == 512 * 2**20 and trial["limits"]["RLIMIT_CORE"] == 0
        assert trial["pdeathsig"] == signal.SIGKILL  # dies with its server, which dies with the worker
        assert trial["marker"] == trial["slot_marker"] and trial["home"] == trial["slot_home"]
    assert seen["as"]["ppid"] != seen["data"]["ppid"]  # one server per containment


@AS_ROOT
def test_a_forked_trial_runs_as_the_sandbox_user_and_cannot_reach_its_server(nobody, shared_sandbox, monkeypatch):
    seen = _cpu_and_gpu_trials(nobody, monkeypatch)
    slot_uid = sandbox.slot_user(nobody, 0, get_settings()).uid  # the slot's own uid, nobody's group
    for trial in seen.values():
        assert (trial["uid"], trial["gid"]) == (slot_uid, nobody.gid) and slot_uid != nobody.uid
        assert trial["limits"]["RLIMIT_CORE"] == 0 and trial["limits"]["RLIMIT_FSIZE"] == 512 * 2**20
        assert trial["server_environ"] == "PermissionError"  # a trial cannot read or ptrace its server
        # the server runs as nobody too, but is not dumpable: its /proc files are root's
        status = Path(f"/proc/{trial['ppid']}/status").read_text()
        assert f"Uid:\t{slot_uid}\t" in status and os.stat(f"/proc/{trial['ppid']}/environ").st_uid == 0
    assert seen["as"]["ppid"] != seen["data"]["ppid"]


def _connect_from_another_process(socket_path: str, log: Path, user: sandbox.SandboxUser | None) -> str:
    """Ask the server to fork from a child process (as `user`): what it answers."""
    script = f"""
import json, socket
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.settimeout(20)
conn.connect({socket_path!r})
request = {{"argv": ["perfbisect.kernels.harness", "--bogus"], "cwd": "/", "env": {{}}, "sys_path": []}}
try:
    with open({str(log)!r}, "ab") as log:
        socket.send_fds(conn, [b"L"], [log.fileno()])
    conn.sendall((json.dumps(request) + "\\n").encode())
    print(repr(conn.recv(4096)))
except OSError as exc:
    print(type(exc).__name__)
"""
    user_args = {} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd="/",
                          **user_args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _server(tmp_path: Path) -> forkserver.ForkServer:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(HARNESS_ROOT)}
    return launch.server_for(env, launch.Containment())


def test_the_fork_server_forks_only_for_the_process_that_started_it(tmp_path: Path):
    server = _server(tmp_path)
    try:
        refused_log = tmp_path / "refused.log"
        refused_log.touch()
        # another process of the same user (a trial would be one): the connection is closed unanswered
        assert _connect_from_another_process(server.socket_path, refused_log, None) in ("b''", "ConnectionResetError",
                                                                                         "BrokenPipeError")
        # the process that started it: forked (the harness refuses the bogus argument)
        request = launch.LaunchRequest(args=["--bogus"], cwd=tmp_path, env={}, import_dir=tmp_path,
                                       log=tmp_path / "accepted.log")
        trial = server.launch(request)
        assert trial.wait(60) == 2 and "usage" in request.log.read_text()
        time.sleep(0.5)  # had the refused request been served, its child would have written by now
        assert refused_log.read_text() == ""
        # nothing of the same uid may ptrace it or read its memory
        assert os.getuid() == 0 or os.stat(f"/proc/{server.hello['pid']}/environ").st_uid == 0
    finally:
        launch.stop_servers()


@AS_ROOT
def test_a_revision_server_forks_only_trials_of_its_own_view(tmp_path: Path):
    """A revision's server enters its trials' view (and drops its capabilities) when it starts;
    a request for another view, or none, is refused, never forked with the server's view."""
    from perfbisect.kernels.harness.contain.trialview import TrialView

    (tmp_path / "tree" / "one").mkdir(parents=True)
    (tmp_path / "tree" / "two").mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(HARNESS_ROOT)}
    view = TrialView(str(tmp_path / "tree"), (str(tmp_path / "tree" / "one"),))
    server = forkserver.ForkServer(env, launch.Containment(), view=view)
    try:
        status = Path(f"/proc/{server.server_pid}/status").read_text()
        assert "CapEff:\t0000000000000000" in status and "CapBnd:\t0000000000000000" in status, status
        request = launch.LaunchRequest(args=["--bogus"], cwd=tmp_path, env={}, import_dir=tmp_path,
                                       log=tmp_path / "trial.log")
        for other in (None, TrialView(view.hidden, (str(tmp_path / "tree" / "two"),))):
            with pytest.raises(launch.ForkServerUnavailable):
                server.launch(replace(request, view=other))
        assert server.launch(replace(request, view=view)).wait(60) == 2  # its own: forked (bogus argument)
    finally:
        server.stop()


@AS_ROOT
def test_a_sandbox_user_that_reaches_the_socket_is_refused(nobody, tmp_path: Path):
    server = _server(tmp_path)
    try:
        Path(server.socket_path).parent.chmod(0o711)  # as if the socket's path had leaked
        os.chmod(server.socket_path, 0o777)
        shared = Path(tempfile.mkdtemp(prefix="perfbisect-peercred-"))
        shared.chmod(0o777)
        log = shared / "refused.log"
        log.touch()
        log.chmod(0o666)
        answer = _connect_from_another_process(server.socket_path, log, nobody)
        assert answer in ("b''", "ConnectionResetError", "BrokenPipeError"), answer
        time.sleep(0.5)
        assert log.read_text() == ""
        shutil.rmtree(shared)
    finally:
        launch.stop_servers()


def _marked(marker: str) -> list[int]:
    return [p.pid for p in proctree.all_processes()
            if not p.zombie and (proctree.marker_of(p.pid) or "").startswith(marker)]


def _user_for_tree_tests() -> sandbox.SandboxUser | None:
    return slotpolicy.lookup_user("nobody") if os.geteuid() == 0 and _nobody_can_run_the_harness() else None


@pytest.mark.parametrize("ending", ["cancelled", "timeout"])
def test_a_stopped_forked_trial_leaves_no_process_behind(ending, shared_sandbox):
    markers_seen: list[str | None] = []
    zombies_before = _zombies_of_this_process()
    with sandbox.slot(user=_user_for_tree_tests()) as box:
        box.worktree.mkdir()
        out = box.tmp / "hang.json"

        def should_stop() -> bool:
            if ending != "cancelled" or not out.exists():
                return False
            markers_seen.extend(proctree.marker_of(pid) for pid in json.loads(out.read_text())["pids"])
            return True

        started = time.monotonic()
        result, out = _trial_in(box, "as", mode="hang", timeout_s=60 if ending == "cancelled" else 8,
                                should_stop=should_stop)
        took = time.monotonic() - started
        pids = json.loads(out.read_text())["pids"]  # the trial, the setsid sleep, the forked orphan
        assert _marked(box.marker) == []
        left = [pid for pid in pids if not procfs.process_gone(pid)]
    assert left == [] and _zombies_of_this_process(besides=zombies_before) == []  # killed and reaped
    assert result["status"] in ("error", "timeout") and ending in result["error"], result
    if ending == "cancelled":
        assert took < 30
        # even the orphan forked without exec carries the trial's marker in /proc/<pid>/environ
        assert markers_seen == [box.marker] * 3


def test_a_trial_dies_with_its_fork_server_and_is_cleaned_up(shared_sandbox):
    """The server killed mid-trial (a worker dying takes it along): the trial dies with it at
    once, though a forked grandchild still holds its connection, and nothing is left behind."""
    killed: list[int] = []
    zombies_before = _zombies_of_this_process()
    with sandbox.slot(user=_user_for_tree_tests()) as box:
        box.worktree.mkdir()
        out = box.tmp / "hang.json"

        def kill_the_server() -> bool:
            if out.exists() and not killed:
                pid = json.loads(out.read_text())["pids"][0]
                killed.append(_ppid(pid))
                os.kill(killed[0], signal.SIGKILL)
            return False

        started = time.monotonic()
        result, out = _trial_in(box, "as", mode="hang", timeout_s=60, should_stop=kill_the_server)
        took = time.monotonic() - started
        pids = json.loads(out.read_text())["pids"]
        assert _marked(box.marker) == []
    assert killed and killed[0] != os.getpid()
    assert result["status"] == "error" and "without a result" in result["error"] and took < 30, result
    assert [pid for pid in pids if not procfs.process_gone(pid)] == []
    assert _zombies_of_this_process(besides=zombies_before) == []


def _zombies_of_this_process(besides: list[proctree.ProcInfo] = ()) -> list[proctree.ProcInfo]:
    """This process's unreaped children, less `besides`: an earlier test in the same pytest worker
    (a child subreaper since a test hardened it) may have left orphans that died here since."""
    return [p for p in proctree.all_processes() if p.ppid == os.getpid() and p.zombie and p not in besides]


def _ppid(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2:].split()[1])


def test_a_forked_trial_gives_the_same_result_and_phases_as_a_subprocess(shared_sandbox):
    results = {}
    for fork in ("auto", "subprocess"):
        with sandbox.slot(user=None) as box:
            box.worktree.mkdir()
            results[fork], out = _trial_in(box, "as", fork=fork)
            assert json.loads(out.read_text())["marker"] == box.marker
    forked, plain = results["auto"], results["subprocess"]
    assert (forked["launcher"], plain["launcher"]) == ("sandbox-fork-server", "sandbox")
    for result in (forked, plain):
        validate_result(result)
        assert result["status"] == "ok" and set(PHASES) - {"checkout", "build"} <= set(result["phases"])
    assert set(forked) == set(plain) and set(forked["phases"]) == set(plain["phases"])
    assert forked["phases"]["import"] < plain["phases"]["import"]  # torch came with the fork


def test_a_repository_shadowing_torch_runs_in_a_contained_subprocess(shared_sandbox):
    with sandbox.slot(user=None) as box:
        box.worktree.mkdir()
        result, out = _trial_in(box, "as", files={"src/triton/__init__.py": ""})
        assert result["status"] == "ok", result
        validate_result(result)
        assert result["launcher"] == "sandbox" and json.loads(out.read_text())["ppid"] == os.getpid()
        assert json.loads(out.read_text())["marker"] == box.marker


PRELOAD_PROBE = """
    import json
    import os

    IMPORTED_BY = os.getpid()


    def probe(x, y):
        with open(os.environ["PROBE_OUT"], "w") as out:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "imported_by": IMPORTED_BY, "uid": os.getuid()}, out)
        return x * (1 - y * y)
"""


@pytest.mark.parametrize("namespaces", ["off", "required"])
def test_a_contained_revision_server_preloads_the_suites_modules(shared_sandbox, monkeypatch, namespaces):
    """PRELOAD in a worker's sandbox: the revision's server runs contained like the shared one
    (same slot, same limits), imports the module once, and each trial is still its own fork."""
    from perfbisect.kernels.harness.caches import revision_caches
    from perfbisect.kernels.harness.contain import bwrap as ns

    if namespaces == "required" and (missing := ns.unusable(None, None)):
        pytest.skip(f"bubblewrap cannot make namespaces here: {missing}")
    monkeypatch.setattr(get_settings(), "sandbox_namespaces", namespaces)
    seen = []
    with sandbox.slot() as box:
        write_files(box.worktree, {"bench/tanh_bwd.py": CUSTOM_SUITE + "\n    PRELOAD = ['probekern.ops']\n",
                                   "src/probekern/__init__.py": "", "src/probekern/ops.py": PRELOAD_PROBE})
        caches = revision_caches(box.cache_root, "c" * 40)
        box.give(box.worktree, caches.jit_dir, caches.reference_dir)
        for _ in range(2):
            out = box.tmp / "p.json"  # the same repository env: the same server
            result = run_harness(SPEC, box.worktree, import_root="src", env={"PROBE_OUT": str(out)}, timeout_s=120,
                                 base_env=box.env({}), scratch_root=box.scratch, caches=caches,
                                 launch=box.launcher("as", None, fork="fork-server"))
            assert result["status"] == "ok", result
            assert result["launcher"] == "sandbox-fork-server" and result["preloaded"] == ["probekern.ops"]
            seen.append(json.loads(out.read_text()))
    first, second = seen
    assert first["pid"] != second["pid"] and first["ppid"] == second["ppid"]
    assert first["imported_by"] == second["imported_by"] == first["ppid"]  # the server's import, inherited
