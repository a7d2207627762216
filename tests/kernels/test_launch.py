"""Starting trials: the fork server gives every trial a fresh process (its own pid, the target
package imported by the trial itself, the trial's env, cwd and sys.path), falls back to a
subprocess, and the phases of every trial are recorded."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from perfbisect.kernels.harness import procfs
from perfbisect.kernels.harness.caches import revision_caches
from perfbisect.kernels.harness.contain import forkserver
from perfbisect.kernels.harness.launch import fork_available, stop_servers
from perfbisect.kernels.harness.phases import PHASES
from perfbisect.kernels.harness.result import validate_result
from perfbisect.kernels.harness.runner import run_harness
from tests.kernels.conftest import CUSTOM_SUITE, write_files

pytestmark = pytest.mark.skipif(not fork_available(), reason="the fork server needs Linux fork")

PROBE = """
    import json
    import os
    import sys

    IMPORTED_BY = os.getpid()        # the process that imported this module


    def probe(x, y):
        with open(os.environ["PROBE_OUT"], "w") as out:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "imported_by": IMPORTED_BY,
                       "flag": os.environ.get("PROBE_FLAG"), "cwd": os.getcwd(),
                       "sys_path": sys.path[:3], "triton_cache": os.environ.get("TRITON_CACHE_DIR"),
                       "torch_imported": "torch" in sys.modules}, out)
        return x * (1 - y * y)
"""
POLICY = {"min_samples": 3, "max_samples": 3, "max_time_s": 0.05, "rel_noise": 0.5, "warmup": 0}


@pytest.fixture(scope="module")
def probe_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    write_files(root, {"bench/tanh_bwd.py": CUSTOM_SUITE, "src/probekern/__init__.py": "",
                       "src/probekern/ops.py": PROBE})
    yield root
    stop_servers()


def probe_trial(repo, out, launcher="auto", caches=None, seed=7, flag="on"):
    spec = {"cases": [{"suite": "file:bench/tanh_bwd.py", "target": "probekern.ops:probe",
                       "params": {"N": 1024}}], "device": "cpu", "policy": POLICY, "seed": seed}
    result = run_harness(spec, repo, import_root="src", env={"PROBE_OUT": str(out), "PROBE_FLAG": flag},
                         timeout_s=120, launcher=launcher, caches=caches)
    assert result["status"] == "ok", result
    return result, json.loads(out.read_text())


def test_fork_server_gives_each_trial_a_fresh_process(probe_repo, tmp_path):
    runs = [probe_trial(probe_repo, tmp_path / "p.json", "fork-server") for _ in range(2)]
    (first, seen1), (second, seen2) = runs
    assert first["launcher"] == second["launcher"] == "fork-server"
    assert seen1["pid"] != seen2["pid"] and os.getpid() not in (seen1["pid"], seen2["pid"])
    assert seen1["ppid"] == seen2["ppid"] != os.getpid()  # both forked by the same server
    # the target package was imported by the trial's own process, not inherited from the server
    assert seen1["imported_by"] == seen1["pid"] and seen2["imported_by"] == seen2["pid"]
    assert seen1["flag"] == "on" and seen1["cwd"] == str(probe_repo.resolve())
    assert seen1["sys_path"][:2] == [str((probe_repo / "src").resolve()), str(probe_repo.resolve())]
    assert seen1["triton_cache"] != seen2["triton_cache"]  # each trial's env: a fresh JIT cache
    # another repository env (a server started with it): applied too
    assert probe_trial(probe_repo, tmp_path / "p.json", "fork-server", flag="v2")[1]["flag"] == "v2"


def test_subprocess_launcher_and_the_fork_server_see_the_same_trial(probe_repo, tmp_path):
    forked = probe_trial(probe_repo, tmp_path / "f.json", "fork-server")[1]
    result, plain = probe_trial(probe_repo, tmp_path / "s.json", "subprocess")
    assert result["launcher"] == "subprocess" and plain["ppid"] == os.getpid()
    assert plain["imported_by"] == plain["pid"]
    assert plain["sys_path"][:2] == forked["sys_path"][:2]
    assert plain["cwd"] == forked["cwd"] and plain["flag"] == forked["flag"]


@pytest.mark.parametrize("launcher", ["fork-server", "subprocess"])
def test_a_flat_layouts_sources_do_not_shadow_what_its_build_put_in_the_import_root(tmp_path, launcher):
    """msgspec's layout: the package sits at the repository's root, and its compiled part exists
    only in the build's output (the import root). The trial imports the built package, not the
    worktree's sources, whichever way it starts (every trial failed to import msgspec._core)."""
    repo = write_files(tmp_path / "flat", {"bench/tanh_bwd.py": CUSTOM_SUITE,
                                           "probekern/__init__.py": "from probekern._core import BUILT\n"})
    write_files(repo / ".perfbisect-build", {"probekern/__init__.py": "", "probekern/_core.py": "BUILT = True\n",
                                             "probekern/ops.py": PROBE})
    spec = {"cases": [{"suite": "file:bench/tanh_bwd.py", "target": "probekern.ops:probe", "params": {"N": 1024}}],
            "device": "cpu", "policy": POLICY, "seed": 7}
    out = tmp_path / "p.json"
    result = run_harness(spec, repo, import_root=".perfbisect-build", env={"PROBE_OUT": str(out), "PROBE_FLAG": "on"},
                         timeout_s=120, launcher=launcher)
    assert result["status"] == "ok", result
    seen = json.loads(out.read_text())
    assert seen["sys_path"][:2] == [str((repo / ".perfbisect-build").resolve()), str(repo.resolve())]


def test_a_repository_shadowing_a_preloaded_package_gets_a_fresh_interpreter(tmp_path):
    repo = write_files(tmp_path / "shadow", {"bench/tanh_bwd.py": CUSTOM_SUITE, "src/probekern/__init__.py": "",
                                             "src/probekern/ops.py": PROBE, "src/triton/__init__.py": ""})
    result, seen = probe_trial(repo, tmp_path / "p.json", "auto")
    assert result["launcher"] == "subprocess" and seen["ppid"] == os.getpid()


def test_every_trial_records_its_phases(probe_repo, tmp_path):
    result, _ = probe_trial(probe_repo, tmp_path / "p.json")
    validate_result(result)
    phases = result["phases"]
    assert set(PHASES) - {"checkout", "build"} <= set(phases)
    assert all(phases[name] >= 0 for name in phases)
    assert phases["timing"] > 0 and phases["first_sample"] <= phases["process"]
    child = sum(phases[name] for name in ("start", "import", "compile", "inputs_reference", "timing", "teardown"))
    assert child == pytest.approx(phases["process"], abs=0.01)


def test_revision_caches_share_the_jit_dir_and_the_reference_per_seed(probe_repo, tmp_path):
    caches = revision_caches(tmp_path / "cache", "a" * 40)
    first, seen1 = probe_trial(probe_repo, tmp_path / "1.json", caches=caches, seed=11)
    second, seen2 = probe_trial(probe_repo, tmp_path / "2.json", caches=caches, seed=11)
    other_seed, _ = probe_trial(probe_repo, tmp_path / "3.json", caches=caches, seed=12)
    assert seen1["triton_cache"] == seen2["triton_cache"] == str(caches.jit_dir)
    assert first["reference_cache"] == {"hits": 0, "misses": 1, "rejected": 0}
    assert second["reference_cache"] == {"hits": 1, "misses": 0, "rejected": 0}
    assert other_seed["reference_cache"]["hits"] == 0
    assert second["cases"][0]["accuracy_error"] == first["cases"][0]["accuracy_error"]


def test_a_fork_server_that_cannot_start_says_why():
    """A wrapper (a sandbox) that fails before the server is up: the error carries what it said,
    not a guess (a bwrap that cannot bind a directory used to read "torch not importable?")."""
    from perfbisect.kernels.harness.launch import (
        Containment,
        ForkServer,
        ForkServerUnavailable,
    )

    wrapper = ("sh", "-c", "echo 'bwrap: Can not access /root/.perfbisect: Permission denied' >&2; exit 1", "sh")
    with pytest.raises(ForkServerUnavailable, match="Can not access /root/.perfbisect: Permission denied"):
        ForkServer(dict(os.environ), Containment(wrapper=wrapper))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_sweep_removes_the_directories_of_dead_fork_servers_only(tmp_path):
    def made(name: str, owner: str | None, age_s: float = 0) -> Path:
        path = tmp_path / (forkserver.DIR_PREFIX + name)
        (path / "home").mkdir(parents=True)
        (path / "home" / "left-by-a-trial").write_text("x")
        if owner is not None:
            (path / forkserver.OWNER_FILE).write_text(owner)
        if age_s:
            old = time.time() - age_s
            os.utime(path, (old, old))
        return path

    ns = procfs.pid_namespace()
    me = f"{os.getpid()} {procfs.process_start(os.getpid())} {ns}"
    live, reused, young, other = made("live", me), made("reused", f"{os.getpid()} 1 {ns}"), made("young", None), tmp_path / "x"
    dead, old = made("dead", f"{_dead_pid()} 12345 {ns}"), made("old", None, age_s=forkserver.STALE_UNOWNED_S + 60)
    elsewhere = made("elsewhere", f"{_dead_pid()} 12345 pid:[1]")  # another container's: not ours to judge
    garbled = made("garbled", "12345", age_s=forkserver.STALE_UNOWNED_S + 60)
    other.mkdir()
    removed = forkserver.sweep_stale_dirs(tmp_path)
    # a pid reused by a live process whose start time differs is not the owner: its directory goes
    assert sorted(removed) == sorted([dead, old, reused, garbled])
    assert live.exists() and young.exists() and other.exists() and elsewhere.exists() and not dead.exists()


def test_a_killed_process_leaves_its_fork_server_directory_and_the_next_one_removes_it(tmp_path):
    """SIGKILL gives the process no chance to stop its servers (atexit does not run): its
    directory stays until a later process starts a server."""
    script = textwrap.dedent(f"""
        import os, signal, sys, tempfile
        tempfile.tempdir = {str(tmp_path)!r}
        from perfbisect.kernels.harness.contain import forkserver
        server = forkserver.ForkServer(dict(os.environ))
        print(server.dir, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    left = Path(out.stdout.strip())
    assert out.returncode == -signal.SIGKILL and left.parent == tmp_path and (left / forkserver.OWNER_FILE).exists()
    assert forkserver.sweep_stale_dirs(tmp_path) == [left] and not left.exists()


def test_a_stopped_fork_server_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = forkserver.ForkServer(dict(os.environ))
    (server.dir / "home" / "written-by-the-server").write_text("x")
    server.stop()
    assert list(tmp_path.iterdir()) == []


def _serving_process(tmp_path: Path, prelude: str = "") -> tuple[subprocess.Popen, Path, int]:
    """A process that starts a fork server in `tmp_path` (its temporary directory) and waits;
    (the process, the server's directory)."""
    script = textwrap.dedent(f"""
        import os, sys, tempfile, time
        tempfile.tempdir = {str(tmp_path)!r}
        {prelude}
        from perfbisect.kernels.harness import launch
        server = launch.server_for(dict(os.environ))
        print(server.dir, server.hello["pid"], flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    directory, pid = proc.stdout.readline().split()
    assert Path(directory).is_dir()
    return proc, Path(directory), int(pid)


def test_a_sigtermed_process_removes_its_fork_server_directories(tmp_path):
    """SIGTERM (a stop) with its default action: the servers stop and their directories go before
    the process dies of the signal, as it would have."""
    proc, directory, server_pid = _serving_process(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert not directory.exists() and list(tmp_path.iterdir()) == []
    assert procfs.process_gone(server_pid)


def test_a_process_that_handles_sigterm_itself_keeps_its_handler_and_stops_its_servers_at_exit(tmp_path):
    prelude = "import signal; signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))"
    proc, directory, _ = _serving_process(tmp_path, prelude)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 3 and not directory.exists()
