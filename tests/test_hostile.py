"""A hostile repository (tests/hostile) run through the real build and trial path (`execute`:
slot, checkout, build, forked trial), as root with the sandbox user, one escape per commit; each
is stopped. On a host where bubblewrap cannot make namespaces the tests that need them skip and
say so (README, Deployment: what production then lacks)."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from perfbisect.kernels.harness import launch
from perfbisect.kernels.harness.contain import tree as proctree
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import TrialWork
from perfbisect.workers import sandbox
from perfbisect.workers.runner import execute
from perfbisect.workers.trialcache import caches_for
from tests.hostile import BUILD_COMMAND, SUITE, TARGET, reported, write_hostile_repo

POLICY = {"min_samples": 2, "max_samples": 2, "max_time_s": 0.05, "rel_noise": 0.5, "warmup": 0}
SLEEP_S = f"{300 + random.random():.6f}"  # names this run's escaped sleeps among the host's

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user needs a root worker"),
              pytest.mark.skipif(not launch.fork_available(), reason="needs Linux")]


def _namespaces_missing() -> str | None:
    try:
        from perfbisect.kernels.harness.contain import bwrap as namespaces
        first_slot = sandbox.slot_user(sandbox.sandbox_user(), 0, get_settings())
    except (ImportError, AttributeError):
        return None  # code without namespaces: the tests run, and must fail
    return namespaces.unusable(first_slot and first_slot.uid, first_slot and first_slot.gid)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("hostile") / "repo"
    return repo, write_hostile_repo(repo, SLEEP_S)


@pytest.fixture(autouse=True)
def shared_sandbox(monkeypatch, sandbox_home):
    """Slots and a home the sandbox uids can traverse (pytest's tmp_path is root-only)."""
    shared = Path(tempfile.mkdtemp(prefix="perfbisect-hostile-"))
    shared.chmod(0o755)
    monkeypatch.setattr(get_settings(), "sandbox_dir", shared)
    if sandbox.sandbox_user() is None:
        pytest.skip("no sandbox user can run this interpreter (README: install where nobody can read it)")
    yield shared
    launch.stop_servers()
    shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture
def namespaced():
    missing = _namespaces_missing()
    if missing:
        pytest.skip(f"SKIPPED, NOT CONTAINED: bubblewrap cannot make namespaces on this host: {missing}")


def run(hostile, escape: str, env: dict[str, str] | None = None, **work) -> dict:
    repo, shas = hostile
    trial = TrialWork(trial_id=1, job_id=1, repo_name="hostile", repo_url=str(repo), build_command=BUILD_COMMAND,
                      import_root=".", env=env or {}, sha=shas[escape], device_class="cpu", policy=POLICY,
                      cases=[{"suite": SUITE, "target": TARGET, "params": {"N": 1024}}])
    return execute(replace(trial, **work))[0]


def test_neither_a_build_nor_a_trial_reaches_the_database_or_redis(hostile, namespaced):
    for escape in ("network_build", "network_trial"):
        seen = reported(run(hostile, escape))
        assert seen is not None and seen["db"] != "connected" and seen["redis"] != "connected", (escape, seen)


def test_neither_a_build_nor_a_trial_sees_the_service_or_writes_the_system(hostile, namespaced, shared_sandbox):
    settings = get_settings()
    for directory in (settings.home / "mirrors", settings.home / "build-cache", shared_sandbox / "elsewhere"):
        directory.mkdir(parents=True, exist_ok=True)
    (shared_sandbox / "elsewhere" / "other-slot-file").touch()
    hidden = [str(settings.home / "mirrors"), str(settings.home / "build-cache"), "/var/run/postgresql",
              "/run", str(shared_sandbox / "elsewhere")]
    for escape in ("snoop_build", "snoop_trial"):
        seen = reported(run(hostile, escape, env={"HOSTILE_PATHS": json.dumps(hidden)}))
        assert seen is not None, escape
        assert not any(seen["seen"].values()), (escape, seen)  # none there (False) or empty ([])
        assert seen["system"] in ("OSError", "PermissionError") and "nosuid" in seen["cwd_mount"], (escape, seen)


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def _state(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2]


def test_a_trial_cannot_stop_its_fork_server_or_another_slot(hostile, namespaced, monkeypatch):
    stop = threading.Event()
    with sandbox.slot() as other:  # another slot, busy with its own work
        other.worktree.mkdir()
        busy = threading.Thread(target=other.run, args=(f"sleep {SLEEP_S}",),
                                kwargs=dict(cwd=other.worktree, env=other.env({}), timeout_s=120, memory=None,
                                            should_stop=stop.is_set))
        busy.start()
        try:
            deadline = time.monotonic() + 30
            while not (pids := [p.pid for p in proctree.all_processes() if not p.zombie
                                and proctree.marker_of(p.pid) == other.marker
                                and _argv(p.pid)[:1] == ["sleep"]]):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            seen = reported(run(hostile, "signal", env={"OTHER_PID": str(pids[0])}))
            assert seen is not None and _state(pids[0]) != "T", seen
            # the next trial of that slot is forked by the same server, at once
            monkeypatch.setattr(get_settings(), "trial_launcher", "fork-server")
            started = time.monotonic()
            after = run(hostile, "benign")
            assert after["status"] == "ok" and time.monotonic() - started < 20, after
        finally:
            stop.set()
            busy.join()


def test_a_package_under_tmp_on_the_pythonpath_is_not_importable_in_a_trial(hostile, namespaced):
    """The repository's env puts a /tmp directory on PYTHONPATH: neither the host's package there
    nor the one its build wrote there is imported (the build's and the trial's /tmp are private)."""
    planted = Path(tempfile.mkdtemp(prefix="hostile-planted-", dir="/tmp"))
    try:
        planted.chmod(0o755)
        (planted / "plantedpkg").mkdir(mode=0o755)
        (planted / "plantedpkg" / "__init__.py").write_text('WHO = "host"\n')
        (planted / "plantedpkg" / "__init__.py").chmod(0o644)
        seen = reported(run(hostile, "tmp_import", env={"HOSTILE_TMP": str(planted), "PYTHONPATH": str(planted)}))
        assert seen is not None and seen["imported"] == "ModuleNotFoundError", seen
        assert planted.name not in seen["tmp"], seen
        assert (planted / "plantedpkg" / "__init__.py").read_text() == 'WHO = "host"\n'  # the build's write went nowhere
    finally:
        shutil.rmtree(planted)


def test_a_trial_cannot_plant_code_in_another_slots_caches(hostile):
    """Slot B's JIT cache of the revision (which B's next trial of it would load) and its cache
    tree: a trial in slot A writes into neither (another uid's 0700 tree; not mounted in A's
    namespace)."""
    repo, shas = hostile
    with sandbox.slot() as other:
        caches = caches_for(get_settings(), shas["plant_cache"], {}, other.cache_root)
        other.give(caches.jit_dir, caches.reference_dir)
        targets = [str(caches.jit_dir), str(caches.reference_dir), str(other.cache_root)]
        seen = reported(run(hostile, "plant_cache", env={"OTHER_CACHES": json.dumps(targets)}))
        assert seen is not None and set(seen["planted"]) == set(targets), seen
        assert "written" not in seen["planted"].values(), seen
        assert not [p for p in other.cache_root.rglob("planted.py")]
        assert (other.cache_root.stat().st_mode & 0o777, other.cache_root.stat().st_uid) == (0o700, other.user.uid)


def _escaped_sleeps() -> list[int]:
    found = []
    for info in proctree.all_processes():
        try:
            if SLEEP_S in Path(f"/proc/{info.pid}/cmdline").read_text() and not info.zombie:
                found.append(info.pid)
        except OSError:
            pass
    return found


def test_a_double_fork_does_not_outlive_a_build_or_a_trial_that_exit_normally(hostile, namespaced):
    result = run(hostile, "double_fork")
    assert result["status"] == "ok", result
    assert _escaped_sleeps() == []


def _default_cap_bytes() -> int:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(total * 0.85 / (os.cpu_count() or 1))


def test_an_allocation_past_the_default_memory_cap_is_stopped_and_reported(hostile):
    """The default cap is the host's memory shared by its slots (this host: one per core): half
    again as much, never touched (so the host is not at risk if it were allowed), fails."""
    result = run(hostile, "memory", env={"HOSTILE_BYTES": str(_default_cap_bytes() * 3 // 2)})
    case = result["cases"][0] if result.get("cases") else {}
    assert reported(result) is None and case.get("status") == "error" and "MemoryError" in case["error"], result


def test_a_fork_bomb_stops_at_the_slot_process_limit(hostile, monkeypatch):
    if "sandbox_max_procs" in type(get_settings()).model_fields:  # (absent before the limit existed)
        monkeypatch.setattr(get_settings(), "sandbox_max_procs", 64)
    seen = reported(run(hostile, "fork_bomb", env={"HOSTILE_FORKS": "300"}))
    assert seen is not None and seen["forked"] < 64 and seen["stopped_by"] == "BlockingIOError", seen


def test_a_setuid_shell_from_the_build_gives_no_root(hostile):
    """Built once (stored in the build cache), then served from the cache: neither copy runs as root."""
    for attempt in ("built", "cached"):
        seen = reported(run(hostile, "setuid", build_inputs=("build.sh",)))
        assert seen is not None and seen["euids"], (attempt, seen)
        assert all(euid in (str(seen["ruid"]), "PermissionError") for euid in seen["euids"].values()), (attempt, seen)
