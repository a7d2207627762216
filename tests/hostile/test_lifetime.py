"""Nothing outlives a trial or a build, and nothing passes from one trial to the next: a hostile
repository's trial (or build) leaves a setsid'd process that keeps re-forking (each parent exits at
once) or plants files in /tmp and /dev/shm, and the next trial, of another repository, in the same
slot and forked by the same fork server, must find neither a process nor a file of it.

Run as root with the sandbox user, through the real build and trial path (`execute`), like
tests/test_hostile.py; skipped where bubblewrap cannot make namespaces, naming why."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from perfbisect.kernels.harness.contain import tree as proctree
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import TrialWork
from perfbisect.workers.runner import execute
from tests.hostile import (
    BUILD_COMMAND,
    ESCAPES,
    SUITE,
    TARGET,
    reported,
    write_hostile_repo,
)
from tests.test_hostile import POLICY, namespaced, shared_sandbox  # noqa: F401 - fixtures

TOKEN = str(random.randrange(10**8, 10**9))  # names this run's survivors among the host's processes; nine digits, no leading zero (the probe writes it as an int literal)

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user needs a root worker")]

# A process of its own session that re-forks for ever, each parent exiting at once (no pid lives
# long enough to be killed by a walk of /proc), writing a file where it was started (the slot's
# worktree: the next trial's checkout goes there) and in /tmp, every 20 ms.
REFORKER = """
import os, sys, time
token, kind, where = sys.argv[1:4]
last = 0.0
while True:
    try:
        if os.fork():
            os._exit(0)
    except OSError:
        time.sleep(0.001)
        continue
    if time.monotonic() - last > 0.02:
        last = time.monotonic()
        for path in (os.path.join(where, "SURVIVED-" + token), "/tmp/SURVIVED-" + token + "-" + kind):
            try:
                open(path, "w").close()
            except OSError:
                pass
"""

_START_REFORKER = f"""\
import subprocess, sys, time
env = {{k: v for k, v in os.environ.items() if k != "PERFBISECT_SANDBOX"}}
subprocess.Popen(["setsid", sys.executable, "-S", "-c", {REFORKER!r}, "{{sleep_s}}", "trial", os.getcwd()],
                 env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 10
while not os.path.exists("/tmp/SURVIVED-{{sleep_s}}-trial") and time.monotonic() < deadline:
    time.sleep(0.01)  # until it runs"""

_BUILD_REFORKER = ("cat > reforker.py <<'PY'\n" + REFORKER + "PY\n"
                   'env -u PERFBISECT_SANDBOX setsid python3 -S reforker.py {sleep_s} build "$PWD" </dev/null >/dev/null 2>&1 &\n'
                   "sleep 0.5\nexit 0")

_PLANT = """\
def plant():
    for directory in ("/tmp", "/dev/shm", *(e.path for e in os.scandir("/tmp") if e.is_dir(follow_symlinks=False))):
        try:
            os.makedirs(os.path.join(directory, "planted-dir-{sleep_s}"), exist_ok=True)
            with open(os.path.join(directory, "planted-{sleep_s}"), "w") as planted:
                planted.write("#!/bin/sh\\necho planted\\n")
        except OSError:
            pass
    # what a naive emptying would trip on: an unreadable directory, a FIFO, and a link to a
    # directory that must survive (the revision's JIT cache, kept for its later trials)
    os.makedirs("/tmp/locked-{sleep_s}/inner")
    open("/tmp/locked-{sleep_s}/inner/file", "w").close()
    os.chmod("/tmp/locked-{sleep_s}/inner", 0)
    os.chmod("/tmp/locked-{sleep_s}", 0)
    os.mkfifo("/tmp/fifo-{sleep_s}")
    open(os.path.join(os.environ["TRITON_CACHE_DIR"], "kept-{sleep_s}"), "w").close()
    os.symlink(os.environ["TRITON_CACHE_DIR"], "/tmp/link-{sleep_s}")
    import ctypes  # and a System V shared memory segment of the slot's IPC namespace
    assert ctypes.CDLL(None).shmget({sleep_s}, 1 << 20, 0o1000 | 0o600) >= 0  # IPC_CREAT
if not os.path.lexists("/tmp/link-{sleep_s}"):  # the probe runs once per sample: plant once
    plant()"""

# what the next trial (another repository) finds: in /tmp, /dev/shm, its checkout, /proc
_PEEK = """\
import time
time.sleep(0.5)  # a survivor writes every 20 ms
token = "{sleep_s}"
def found(top):
    # on its own filesystem: not in the binds of host paths under /tmp in a test (slot, caches)
    device, names = os.stat(top).st_dev, []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.stat(os.path.join(root, d)).st_dev == device]
        names += [os.path.join(root, name) for name in dirs + files if token in name]
    return sorted(names)
def mine(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return token.encode() in cmdline.read()
    except OSError:
        return False
with open("/proc/sysvipc/shm") as table:
    segments = [line.split()[0] for line in table.readlines()[1:]]
report(tmp=found("/tmp"), shm=found("/dev/shm"), checkout=found("."), ipc=segments,
       processes=[pid for pid in os.listdir("/proc") if pid.isdigit() and mine(pid)])"""

# /tmp and /dev/shm are RAM: what a trial writes there must stop within the slot's budget
_FILL = """\
written, stopped = {}, {}
for directory in ("/tmp", "/dev/shm"):
    written[directory], stopped[directory] = 0, None
    with open(os.path.join(directory, "fill"), "wb") as out:
        try:
            while written[directory] < int(os.environ["HOSTILE_BYTES"]):
                written[directory] += out.write(b"x" * (1 << 20))
                out.flush()
        except OSError as exc:
            stopped[directory] = type(exc).__name__
    os.unlink(os.path.join(directory, "fill"))
report(written_mib={d: n >> 20 for d, n in written.items()}, stopped=stopped)"""

# a tree deeper than the emptying goes (teardown.MAX_DEPTH): the server quits instead, and the
# next trial gets a new one, with a new /tmp
_DEEP = """\
path = "/tmp/deep-{sleep_s}"
if not os.path.exists(path):
    os.makedirs(path + "/d" * 300)
    open(path + "/d" * 300 + "/bottom-{sleep_s}", "w").close()"""

ATTACKER = {"benign": ESCAPES["benign"], "reforker_trial": ("exit 0", _START_REFORKER),
            "reforker_build": (_BUILD_REFORKER, ""), "plant_tmp": ("exit 0", _PLANT), "fill_tmpfs": ("exit 0", _FILL), "deep_tmp": ("exit 0", _DEEP)}
VICTIM = {"peek": ("exit 0", _PEEK)}


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, tuple[Path, dict[str, str]]]:
    """The attacker's repository and another one, whose trial looks for what the first left."""
    root = tmp_path_factory.mktemp("lifetime")
    return {name: (root / name, write_hostile_repo(root / name, TOKEN, escapes))
            for name, escapes in (("attacker", ATTACKER), ("victim", VICTIM))}


@pytest.fixture(autouse=True)
def forked(monkeypatch):
    """Every trial forked from the slot's fork server (the path where trials share a server)."""
    monkeypatch.setattr(get_settings(), "trial_launcher", "fork-server")


def run(repos, repo: str, escape: str, env: dict[str, str] | None = None, **work) -> dict:
    path, shas = repos[repo]
    trial = TrialWork(trial_id=1, job_id=1, repo_name=repo, repo_url=str(path), build_command=BUILD_COMMAND,
                      import_root=".", env=env or {}, sha=shas[escape], device_class="cpu",
                      policy=POLICY, cases=[{"suite": SUITE, "target": TARGET, "params": {"N": 1024}}])
    return execute(replace(trial, **work))[0]


def survivors(watch_s: float = 0.5) -> list[int]:
    """The live processes of this host whose command line carries this run's token, seen in any
    of the scans of /proc during `watch_s` (a re-forking process's pids each live for
    microseconds: one scan may miss them all)."""
    found: set[int] = set()
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline:
        for info in proctree.all_processes():
            try:
                if not info.zombie and TOKEN.encode() in Path(f"/proc/{info.pid}/cmdline").read_bytes():
                    found.add(info.pid)
            except OSError:
                pass
    return sorted(found)


@pytest.fixture
def no_survivor_left():
    """Whatever a failing run left re-forking is killed here (it would load the host)."""
    yield
    deadline = time.monotonic() + 10
    while (pids := survivors(0.1)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def peek(repos) -> dict:
    seen = reported(run(repos, "victim", "peek"))
    assert seen is not None
    return seen


@pytest.mark.parametrize("escape", ["reforker_trial", "reforker_build"])
def test_a_reforking_survivor_dies_with_its_trial_or_build(repos, escape, namespaced, no_survivor_left):
    result = run(repos, "attacker", escape)
    assert result["status"] == "ok", result
    assert survivors() == []
    seen = peek(repos)
    assert seen == {"tmp": [], "shm": [], "checkout": [], "processes": [], "ipc": []}, seen
    assert survivors() == []


def test_files_planted_in_tmp_and_dev_shm_and_shared_memory_are_gone_for_the_next_trial(repos, namespaced):
    result = run(repos, "attacker", "plant_tmp")
    assert result["status"] == "ok", result
    seen = peek(repos)
    assert (seen["tmp"], seen["shm"], seen["ipc"]) == ([], [], []), seen
    assert survivors() == []
    # the emptying removed the link, not what it pointed to
    assert [p.name for p in (get_settings().home / "trial-cache").rglob(f"kept-{TOKEN}")] == [f"kept-{TOKEN}"]


def test_the_next_trial_of_the_same_server_still_starts_at_once(repos, namespaced):
    """The teardown keeps the fork server: a trial after a survivor is forked, not a new server."""
    run(repos, "attacker", "reforker_trial")
    started = time.monotonic()
    result = run(repos, "attacker", "benign")
    assert result["status"] == "ok" and result.get("launcher") == "sandbox-fork-server", result
    assert time.monotonic() - started < 20, json.dumps(result)[:2000]


def test_what_a_trial_holds_in_tmp_and_dev_shm_stops_within_the_slots_budget(repos, namespaced, monkeypatch):
    """Without a delegated cgroup (this host's case) no bound counts a trial's processes
    together; what it can hold besides them, its /tmp and /dev/shm, is carved out of the slot's
    budget: a 4 GiB slot gets 512 MiB of each (and 3 GiB per process), not the 1 GiB of before."""
    monkeypatch.setattr(get_settings(), "trial_memory_mb", 4096)
    seen = reported(run(repos, "attacker", "fill_tmpfs", env={"HOSTILE_BYTES": str(640 << 20)}))
    assert seen is not None, seen
    assert seen["stopped"] == {"/tmp": "OSError", "/dev/shm": "OSError"}, seen
    assert all(written <= 512 for written in seen["written_mib"].values()), seen


def fork_servers() -> set[int]:
    """This process's fork servers (and their bwraps), not those of other tests on this host."""
    mine = proctree.descendants(os.getpid(), proctree.all_processes())
    return {p.pid for p in mine if not p.zombie
            and b"perfbisect.kernels.harness.contain.zygote" in Path(f"/proc/{p.pid}/cmdline").read_bytes()}


def test_a_tmp_too_deep_to_empty_ends_its_fork_server_and_the_next_trial_gets_a_new_one(repos, namespaced):
    run(repos, "attacker", "benign")  # the slot's server is up
    before = fork_servers()
    result = run(repos, "attacker", "deep_tmp")
    assert result["status"] == "ok", result
    seen = peek(repos)
    assert seen["tmp"] == [], seen
    assert before and not before & fork_servers()  # the server that could not empty /tmp is gone
