"""Repository code stays contained, with real processes: a hostile build hunting for secrets,
a build that forks an escaping `setsid` grandchild holding stdout, a memory hog, a cancel, and
(as root) the unprivileged sandbox user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from perfbisect.kernels.harness.contain import tree as proctree
from perfbisect.service.db import get_engine
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import TrialWork
from perfbisect.workers import redact, sandbox, slotpolicy
from perfbisect.workers.build import run_build
from perfbisect.workers.runner import execute
from perfbisect.workers.trialcache import caches_for
from tests.gitrepo import make_repo

SECRET_TOKEN = "ghp_containment0123456789secret"
DB_PASSWORD = "s3cret-db-password"


@pytest.fixture
def secrets_in_env(monkeypatch):
    """The worker's environment holds secrets, as a deployed worker's does."""
    monkeypatch.setenv("PERFBISECT_GITHUB_TOKEN", SECRET_TOKEN)
    monkeypatch.setenv("DATABASE_URL", f"postgresql://perfbisect:{DB_PASSWORD}@db.internal:5432/perfbisect")
    redact.secrets.cache_clear()
    get_settings.cache_clear()
    yield
    redact.secrets.cache_clear()
    get_settings.cache_clear()  # the next test reads the real settings again
    get_engine.cache_clear()


def marked_processes(marker_prefix: str) -> list[int]:
    return [p.pid for p in proctree.all_processes()
            if not p.zombie and (proctree.marker_of(p.pid) or "").startswith(marker_prefix)]


def trial_work(repo: Path, build_command: str) -> TrialWork:
    return TrialWork(trial_id=1, job_id=1, repo_name="hostile", repo_url=str(repo), build_command=build_command,
                     import_root=".", env={"REPO_SETTING": "kept"}, sha="HEAD", cases=[], device_class="cpu",
                     policy=None)


def test_a_hostile_build_finds_no_secret_and_stores_none(secrets_in_env, tmp_path: Path) -> None:
    repo = tmp_path / "hostile"
    sha = make_repo(repo, ["init"])[-1]
    hunt = ("echo ENV; env; echo PARENT; cat /proc/$PPID/environ | tr '\\0' '\\n'; "
            "echo INIT; cat /proc/1/environ | tr '\\0' '\\n'; echo DONE; exit 3")
    work = trial_work(repo, hunt)
    result, _ = execute(TrialWork(**{**work.__dict__, "sha": sha}))
    stored = str(result)
    assert result["status"] == "build_error" and "exited 3" in result["error"] and "DONE" in result["error"]
    assert "REPO_SETTING=kept" in result["error"]  # the repository's own env is passed
    for secret in (SECRET_TOKEN, DB_PASSWORD, "DATABASE_URL=postgresql", "REDIS_URL=redis"):
        assert secret not in stored


def test_the_environment_is_an_allow_list(secrets_in_env, tmp_path: Path) -> None:
    env = sandbox.scrubbed_env({"TRITON_CACHE_DIR": "/x"}, tmp_path / "home", tmp_path / "tmp")
    assert "DATABASE_URL" not in env and "PERFBISECT_GITHUB_TOKEN" not in env
    assert not any(k.startswith("PERFBISECT_") for k in env)
    assert env["HOME"] == str(tmp_path / "home") and env["TRITON_CACHE_DIR"] == "/x"
    # `python` in a build command is the worker's interpreter, not one on the worker's own PATH
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)


def test_stored_text_is_redacted_of_configured_secrets(secrets_in_env) -> None:
    text = f"token {SECRET_TOKEN} url redis://:other-pass@cache:6379/0 and {DB_PASSWORD}"
    cleaned = redact.redact(text)
    assert SECRET_TOKEN not in cleaned and DB_PASSWORD not in cleaned and "other-pass" not in cleaned


def test_a_timeout_kills_a_grandchild_that_escaped_with_setsid(tmp_path: Path) -> None:
    escape = "setsid sh -c 'sleep 300; echo late' & sleep 300"
    started = time.monotonic()
    with sandbox.slot() as box:
        box.worktree.mkdir()
        built = run_build(escape, box, {}, timeout_s=2)
        prefix = box.marker.split("#")[0] + "#"
        assert marked_processes(prefix) == []
    assert time.monotonic() - started < 6  # the orphan holds stdout, but output goes to a file
    assert not built.ok and built.stopped == "timeout"
    # the slot is wiped: worktree, HOME, TMPDIR, log (the emptied directory stays: a fork server
    # of the slot has it mounted)
    assert list(box.path.iterdir()) == []


def test_a_stop_request_kills_the_tree_within_a_second(tmp_path: Path) -> None:
    stop_at = time.monotonic() + 1.0
    with sandbox.slot() as box:
        box.worktree.mkdir()
        started = time.monotonic()
        done = box.run("setsid sleep 300 & sleep 300", cwd=box.worktree, env=box.env({}), timeout_s=60,
                       memory=None, should_stop=lambda: time.monotonic() > stop_at)
        assert done.stopped == "cancelled" and time.monotonic() - started < 2.5
        assert marked_processes(box.marker) == []


def _zombie_children() -> set[int]:
    return {p.pid for p in proctree.all_processes() if p.ppid == os.getpid() and p.zombie}


def test_a_slot_reaps_the_orphans_adopted_outside_any_trial_and_leaves_a_popens_child() -> None:
    """The worker is a child subreaper, so an orphan of a helper it ran outside any trial (`git gc
    --auto` detaches from a fetch's git) is re-parented to it and, once it exits, stays a zombie
    for as long as the worker lives; a slot's release reaps it, and leaves alone the child that a
    Popen will still wait for (its exit status must survive)."""
    proctree.harden_worker_process()
    orphan = int(subprocess.run(["sh", "-c", "sleep 0.1 & echo $!"], capture_output=True, text=True,
                                check=True).stdout)
    waited = subprocess.Popen(["sh", "-c", "exit 3"])
    deadline = time.monotonic() + 10
    while not {orphan, waited.pid} <= _zombie_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert {orphan, waited.pid} <= _zombie_children()  # adopted, dead, unreaped
    with sandbox.slot():
        pass
    assert orphan not in _zombie_children() and waited.pid in _zombie_children()
    assert waited.wait(timeout=5) == 3


def test_the_memory_cap_fails_an_oversized_allocation(monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "trial_memory_mb", 200)
    hog = "python3 -c 'x = bytearray(1024 * 1024 * 1024); print(\"allocated\")'"
    with sandbox.slot(user=None) as box:
        box.worktree.mkdir()
        capped = box.run(hog, cwd=box.worktree, env=box.env({}), timeout_s=60, memory="as")
    assert capped.returncode != 0 and "MemoryError" in capped.output_tail and "allocated" not in capped.output_tail


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_as_root_repository_code_runs_as_the_sandbox_user(monkeypatch, sandbox_home) -> None:
    nobody = slotpolicy.lookup_user("nobody")
    shared = Path(tempfile.mkdtemp(prefix="perfbisect-sandbox-"))  # pytest's tmp_path is root-only
    shared.chmod(0o755)
    monkeypatch.setattr(get_settings(), "sandbox_dir", shared)
    with sandbox.slot(user=nobody) as box:
        box.worktree.mkdir()
        box.give(box.worktree)
        done = box.run(f"id -u; touch $HOME/ok && echo home-writable; cat /proc/{os.getpid()}/environ || echo denied",
                       cwd=box.worktree, env=box.env({}), timeout_s=30, memory="data")
    shutil.rmtree(shared)
    lines = done.output_tail.split()
    # the slot's own uid (nobody's group); the worker's /proc entry is not even visible in a sandbox
    assert lines[0] == str(box.user.uid) and box.user.gid == nobody.gid and box.user.uid != nobody.uid
    assert "home-writable" in lines and "denied" in lines


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_home_the_sandbox_user_cannot_enter_is_refused_at_start(monkeypatch, tmp_path: Path) -> None:
    """On the H200 node PERFBISECT_HOME was under /root (0700): the check passed and every trial
    then failed with a PermissionError. The check now enters the directories as the user."""
    settings = get_settings()
    monkeypatch.setattr(settings, "sandbox_user", "nobody")
    monkeypatch.setattr(settings, "environment", "production")
    shared = Path(tempfile.mkdtemp(prefix="perfbisect-home-"))
    sandbox.sandbox_user.cache_clear()  # decided once per worker process
    try:
        shared.chmod(0o755)
        monkeypatch.setattr(settings, "home", shared / "home")
        monkeypatch.setattr(settings, "sandbox_dir", shared / "sandbox")
        try:
            assert sandbox.sandbox_user() == slotpolicy.lookup_user("nobody")
        except sandbox.SandboxError as exc:
            if sys.executable in str(exc):
                pytest.skip(f"nobody cannot run this checkout's interpreter: {exc}")
            raise

        monkeypatch.setattr(settings, "home", tmp_path / "home")  # pytest's tmp_path is root-only
        sandbox.sandbox_user.cache_clear()
        with pytest.raises(sandbox.SandboxError, match=r"cannot enter .*trial-cache: Permission denied"):
            sandbox.sandbox_user()
    finally:
        shutil.rmtree(shared)
        sandbox.sandbox_user.cache_clear()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_slots_caches_are_its_own_uids_alone(monkeypatch, sandbox_home) -> None:
    """Without namespaces too (the uid barrier alone): a slot's uid fills its own revision cache,
    and cannot enter another slot's (mode 0700), so it cannot plant a kernel or a reference
    that the other slot's trials of the revision would read."""
    nobody = slotpolicy.lookup_user("nobody")
    shared = Path(tempfile.mkdtemp(prefix="perfbisect-sandbox-"))
    shared.chmod(0o755)
    monkeypatch.setattr(get_settings(), "sandbox_dir", shared)
    monkeypatch.setattr(get_settings(), "sandbox_namespaces", "off")
    try:
        with sandbox.slot(user=nobody) as first, sandbox.slot(user=nobody) as second:
            assert first.user.uid != second.user.uid and first.cache_root != second.cache_root
            jit = []
            for box in (first, second):
                jit.append(caches_for(get_settings(), "a" * 40, {}, box.cache_root).jit_dir)
                box.give(jit[-1])  # as each slot's trial is started
                box.worktree.mkdir()
            own = first.run("touch kernel.so && echo wrote", cwd=jit[0], env=first.env({}), timeout_s=30, memory=None)
            planted = first.run(f"touch {jit[1]}/kernel.so", cwd=first.worktree, env=first.env({}), timeout_s=30,
                                memory=None)
            assert own.output_tail.strip() == "wrote", own
            assert planted.returncode != 0 and "Permission denied" in planted.output_tail, planted
            assert not (jit[1] / "kernel.so").exists()
            for box in (first, second):
                mode = box.cache_root.stat()
                assert (mode.st_mode & 0o777, mode.st_uid) == (0o700, box.user.uid)
            assert (jit[0] / "kernel.so").stat().st_mode & 0o022 == 0  # umask 022
    finally:
        shutil.rmtree(shared)
