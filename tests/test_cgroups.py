"""cgroup v2 limits per sandbox slot (workers/cgroups.py) on a fake delegated cgroup tree in
tmp_path: the files written and their values (from the host's memory and the slot count), the
fallback to rlimits said once, and a slot's processes entering its cgroup before they run."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.kernels.harness.contain import bwrap, cgroup
from perfbisect.kernels.harness.contain.process import Containment
from perfbisect.service.settings import get_settings
from perfbisect.workers import cgroups, hostshare, sandbox, slotpolicy


@pytest.fixture
def delegated(tmp_path: Path, monkeypatch) -> Path:
    """A cgroup v2 directory as the host delegates it: controllers available, this worker in it."""
    root = tmp_path / "perfbisect.service"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("4242\n")
    settings = get_settings()
    monkeypatch.setattr(settings, "sandbox_cgroup_dir", root)
    monkeypatch.setattr(settings, "sandbox_slots", 4)
    monkeypatch.setattr(settings, "trial_memory_mb", None)
    monkeypatch.setattr(settings, "sandbox_max_procs", 512)
    monkeypatch.setattr(cgroups.os, "sched_getaffinity", lambda pid: set(range(8)))
    cgroups.delegated.cache_clear()
    yield root
    cgroups.delegated.cache_clear()


def test_a_slot_gets_its_memory_pids_and_cpu_share(delegated) -> None:
    path = Path(cgroups.slot_cgroup(get_settings(), 2))
    assert path == delegated / "slot-2"
    host_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert int((path / "memory.max").read_text()) == (int(host_bytes * 0.85 / 4) >> 20) << 20  # a quarter of 85%
    assert (path / "pids.max").read_text() == "512"
    assert (path / "cpuset.cpus").read_text() == "4,5"  # the third quarter of CPUs 0-7
    assert (delegated / "cgroup.subtree_control").read_text() == "+cpuset +memory +pids"
    assert (delegated / "worker" / "cgroup.procs").read_text() == "4242"  # the worker left the inner node


def test_a_set_memory_cap_and_no_process_limit(delegated, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "trial_memory_mb", 2048)
    monkeypatch.setattr(get_settings(), "sandbox_max_procs", 0)
    path = Path(cgroups.slot_cgroup(get_settings(), 0))
    assert ((path / "memory.max").read_text(), (path / "pids.max").read_text()) == (str(2048 << 20), "max")


@pytest.mark.parametrize(("index", "slots", "cpus", "share"), [
    (0, 2, [0, 1, 2, 3], "0,1"), (1, 2, [3, 2, 1, 0], "2,3"), (2, 2, [0, 1, 2, 3], "0,1"),
    (0, 3, [0, 1, 2, 3, 4, 5, 6], "0,1"), (5, 8, [0, 1, 2, 3], "1"),
])
def test_cpu_shares(index, slots, cpus, share) -> None:
    assert cgroup.cpu_share(index, slots, cpus) == share


def test_without_a_delegated_cgroup_rlimits_stand_alone_said_once(tmp_path, monkeypatch, caplog) -> None:
    for directory, why in ((None, "PERFBISECT_SANDBOX_CGROUP_DIR is unset"),
                           (tmp_path, "is not a cgroup v2 directory")):
        monkeypatch.setattr(get_settings(), "sandbox_cgroup_dir", directory)
        cgroups.delegated.cache_clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="perfbisect.workers.cgroups"):
            assert cgroups.slot_cgroup(get_settings(), 0) == cgroups.slot_cgroup(get_settings(), 1) == ""
        said = [r.getMessage() for r in caplog.records if "cgroup v2 limits off" in r.getMessage()]
        assert len(said) == 1 and why in said[0], said
    cgroups.delegated.cache_clear()


def test_a_tree_lacking_a_controller_is_not_used(delegated) -> None:
    (delegated / "cgroup.controllers").write_text("cpu io memory\n")
    assert cgroups.slot_cgroup(get_settings(), 0) == ""
    assert not (delegated / "slot-0").exists()


def test_a_process_enters_its_cgroup_before_it_runs(delegated) -> None:
    path = Path(cgroups.slot_cgroup(get_settings(), 1))
    (path / "cgroup.procs").write_text("")
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getuid())"], capture_output=True, text=True,
                          **Containment(cgroup=str(path)).popen_args())
    assert done.returncode == 0 and (path / "cgroup.procs").read_text() == "0"  # "0": the writing process


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_slots_commands_enter_its_cgroup_then_run_as_its_uid(delegated, monkeypatch, sandbox_home) -> None:
    """The slot's cgroup is entered as the worker (root), then the user is switched: the
    command runs as the slot's uid."""
    monkeypatch.setattr(get_settings(), "sandbox_dir", sandbox_home / "sandbox")
    monkeypatch.setattr(get_settings(), "sandbox_namespaces", "off")
    nobody = slotpolicy.lookup_user("nobody")
    with sandbox.slot(user=nobody) as box:
        assert box.cgroup and Path(box.cgroup).parent == delegated
        procs = Path(box.cgroup) / "cgroup.procs"
        procs.write_text("")
        box.worktree.mkdir()
        done = box.run("id -u", cwd=box.worktree, env=box.env({}), timeout_s=30, memory=None)
    assert done.returncode == 0 and done.output_tail.strip() == str(box.user.uid)
    assert procs.read_text() == "0"


def _budget_fits(settings) -> None:
    """A process at its cap plus full /tmp and /dev/shm fit the slot's budget, and all slots
    together fit the host's memory."""
    budget, tmpfs, cap = (hostshare.slot_budget_mb(settings), hostshare.tmpfs_mb(settings),
                          hostshare.memory_cap_mb(settings))
    assert 0 < tmpfs <= hostshare.TMPFS_MAX_MB and 0 < cap and cap + 2 * tmpfs <= budget
    assert hostshare.host_slots(settings) * budget <= hostshare.host_memory_mb()


def test_with_a_delegated_cgroup_the_report_says_the_trial_is_bounded_tmpfs_included(delegated) -> None:
    settings = get_settings()
    _budget_fits(settings)
    said = cgroups.memory_report(settings)
    budget = hostshare.slot_budget_mb(settings)
    assert said.startswith(f"memory: bounded per trial by cgroup v2 ({delegated}): memory.max {budget} MiB"), said
    assert "pids.max 512" in said and f"/tmp and /dev/shm {hostshare.tmpfs_mb(settings)} MiB each" in said
    assert not (delegated / "worker").exists()  # reporting moves no process


def test_without_one_the_report_says_memory_is_bounded_per_process_only(monkeypatch) -> None:
    """The honest fallback: rlimits per process and a process limit; the slot's tmpfs is carved
    out of its budget (a small budget: small /tmp and /dev/shm), the slots stay within the host."""
    settings = get_settings()
    monkeypatch.setattr(settings, "sandbox_cgroup_dir", None)
    monkeypatch.setattr(settings, "trial_memory_mb", None)
    _budget_fits(settings)
    said = cgroups.memory_report(settings)
    cap = hostshare.memory_cap_mb(settings)
    assert said.startswith("memory: bounded per process only (PERFBISECT_SANDBOX_CGROUP_DIR is unset)"), said
    assert f"{cap} MiB per process" in said and f"hold N x {cap} MiB" in said
    monkeypatch.setattr(settings, "trial_memory_mb", 2048)
    assert (hostshare.tmpfs_mb(settings), hostshare.memory_cap_mb(settings)) == (256, 1536)
    assert bwrap.argv(bwrap.View((), tmpfs_bytes=256 << 20)).count(str(256 << 20)) == 2


def test_doctor_says_which_memory_bound_applies(monkeypatch) -> None:
    from typer.testing import CliRunner

    from perfbisect.cli.main import app

    monkeypatch.setattr(get_settings(), "sandbox_cgroup_dir", None)
    result = CliRunner().invoke(app, ["doctor", "--device", "cpu", "--no-flush-check"])
    assert "memory: bounded per process only (PERFBISECT_SANDBOX_CGROUP_DIR is unset)" in result.output, result.output
