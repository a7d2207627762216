"""A worker's trial end to end (real git checkout, real build command, real trial processes):
the phases of the checkout and the build join the harness's, and the trials of one revision
share its JIT cache and accuracy reference under PERFBISECT_HOME, another revision gets its own;
the trials of every revision are forked from one fork server."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfbisect.kernels.harness import launch
from perfbisect.kernels.harness.launch import stop_servers
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import TrialWork
from perfbisect.workers.runner import execute
from perfbisect.workers.trialcache import cache_root
from tests.gitrepo import git
from tests.kernels.conftest import CUSTOM_SUITE, write_files
from tests.kernels.test_launch import POLICY, PROBE


@pytest.fixture(autouse=True)
def without_namespaces(monkeypatch):
    """The probe writes what its trial saw to this test's directory, which a trial in namespaces
    cannot see (tests/test_hostile.py runs the same path in namespaces)."""
    monkeypatch.setattr(get_settings(), "sandbox_namespaces", "off")


@pytest.fixture(scope="module")
def probe_git_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    root = write_files(tmp_path_factory.mktemp("probe-git"), {
        "bench/tanh_bwd.py": CUSTOM_SUITE, "src/probekern/__init__.py": "", "src/probekern/ops.py": PROBE})
    git(root, "init", "-q", "-b", "main")
    shas = []
    for note in ("one", "two"):
        (root / "NOTES").write_text(note)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", note)
        shas.append(git(root, "rev-parse", "HEAD"))
    yield root, shas
    stop_servers()


def work(repo: Path, sha: str, out: Path) -> TrialWork:
    return TrialWork(trial_id=1, job_id=1, repo_name="probe", repo_url=str(repo), build_command="true",
                     import_root="src", env={"PROBE_OUT": str(out), "PROBE_FLAG": "on"}, sha=sha,
                     cases=[{"suite": "file:bench/tanh_bwd.py", "target": "probekern.ops:probe",
                             "params": {"N": 1024}}],
                     device_class="cpu", policy=POLICY)


def test_trials_of_a_revision_share_its_caches_and_record_every_phase(probe_git_repo, tmp_path):
    repo, shas = probe_git_repo
    out = tmp_path / "probe.json"
    runs = []
    stop_servers()
    for sha in (shas[0], shas[0], shas[1]):
        result, build_s = execute(work(repo, sha, out))
        assert result["status"] == "ok", result
        runs.append((result, json.loads(out.read_text())))
    (first, seen1), (second, seen2), (other, seen3) = runs
    root = cache_root(get_settings())
    assert seen1["triton_cache"] == seen2["triton_cache"] != seen3["triton_cache"]
    assert Path(seen1["triton_cache"]).is_relative_to(root) and shas[0] in seen1["triton_cache"]
    assert (first["reference_cache"]["misses"], second["reference_cache"]["hits"]) == (1, 1)
    assert other["reference_cache"]["hits"] == 0  # another revision: its own seed and reference
    assert first["seed"] == second["seed"] != other["seed"]
    # each revision's JIT directories reach its trials, not the server: one server forks them all
    assert {result["launcher"] for result, _ in runs} == {"sandbox-fork-server"}
    assert len(launch._servers) == 1
    phases = first["phases"]
    for name in ("checkout", "build", "start", "import", "compile", "inputs_reference", "timing", "teardown",
                 "total", "timed_kernels"):
        assert phases[name] >= 0, name
    assert phases["build"] > 0 and phases["total"] >= phases["process"] + phases["build"]


def test_the_same_commit_in_another_repository_gets_caches_of_its_own(probe_git_repo, tmp_path):
    """A fork holds the same commits, built by its own build command: neither repository may load
    the kernels or references the other's trials left under that sha."""
    repo, shas = probe_git_repo
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(repo), str(fork))
    seen = []
    for url, name in ((repo, "probe"), (fork, "probe-fork")):
        result, _ = execute(replace(work(url, shas[0], tmp_path / "probe.json"), repo_name=name))
        assert result["status"] == "ok", result
        seen.append((result, json.loads((tmp_path / "probe.json").read_text())))
    (_, original), (forked, in_fork) = seen
    assert original["triton_cache"] != in_fork["triton_cache"] and shas[0] in in_fork["triton_cache"]
    assert forked["reference_cache"]["hits"] == 0, forked["reference_cache"]


def test_a_checkout_failure_is_the_workers_failure_not_the_revisions(probe_git_repo, tmp_path):
    repo, _ = probe_git_repo
    result, build_s = execute(work(repo, "0123456789abcdef0123456789abcdef01234567", tmp_path / "probe.json"))
    assert result["status"] == "worker_error" and build_s is None
    assert result["error"].startswith("checkout failed: cannot check out 0123456789ab")


def test_a_worker_leaves_after_two_worker_failures_in_a_row(monkeypatch):
    from perfbisect.queue import celery_app
    from perfbisect.workers import tasks

    left: list[list[str]] = []
    monkeypatch.setattr(celery_app.control, "shutdown", lambda destination: left.append(destination))
    monkeypatch.setattr(tasks, "_worker_errors", 0)
    monkeypatch.setattr(tasks, "get_settings", lambda: type("S", (), {"embedded": False})())
    for status in ("worker_error", "ok", "worker_error", "build_error"):  # never two in a row
        tasks._leave_if_broken(status, "checkout failed: x", "cpu-1@node")
    assert left == []
    tasks._leave_if_broken("worker_error", "checkout failed: x", "cpu-1@node")
    tasks._leave_if_broken("worker_error", "sandbox: all 64 sandbox slots of this host are in use", "cpu-1@node")
    assert left == [["cpu-1@node"]]
    monkeypatch.setattr(tasks, "get_settings", lambda: type("S", (), {"embedded": True})())
    tasks._leave_if_broken("worker_error", "x", "embedded")  # the embedded worker is the process itself
    assert left == [["cpu-1@node"]]


def test_a_gpu_workers_cache_setting_reaches_its_trials_spec(monkeypatch):
    """The sandbox passes no PERFBISECT_* variable to a trial: the worker's PERFBISECT_GPU_CACHES
    travels in the spec (a GPU class only: the CPU stand-in flushes its own LLC)."""
    from perfbisect.workers.runner import harness_spec

    cases = [{"suite": "flydsl_gemm", "target": "m:f", "params": {}}]
    monkeypatch.setattr(get_settings(), "gpu_caches", "L2=4MiB*8,MALL=256MiB")
    assert harness_spec(cases, "rocm", None)["gpu_caches"] == "L2=4MiB*8,MALL=256MiB"
    assert harness_spec(cases, "rocm", None)["device"] == "cuda"  # ROCm's torch device
    assert "gpu_caches" not in harness_spec(cases, "cpu", None)
    monkeypatch.setattr(get_settings(), "gpu_caches", None)
    assert "gpu_caches" not in harness_spec(cases, "rocm", None)
