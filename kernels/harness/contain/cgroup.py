"""cgroup v2 directories for contained processes: check a delegated directory, prepare it (the
processes already in it moved to a leaf, the controllers enabled below it) and make a child of it
with its limits. A process enters one as it starts (process.Containment.cgroup). Which directory
and which limits is the worker's policy (workers/cgroups.py). Only the standard library."""
from __future__ import annotations

import os
from pathlib import Path

CONTROLLERS = ("cpuset", "memory", "pids")


def unusable(directory: Path | None) -> str | None:
    """Why `directory` cannot hold the slots' cgroups (None: it can)."""
    if directory is None:
        return "PERFBISECT_SANDBOX_CGROUP_DIR is unset"
    try:
        available = (directory / "cgroup.controllers").read_text().split()
    except OSError:
        return f"{directory} is not a cgroup v2 directory"
    missing = [c for c in CONTROLLERS if c not in available]
    if missing:
        return f"{directory} lacks the {', '.join(missing)} controller(s): delegate them"
    if not os.access(directory / "cgroup.subtree_control", os.W_OK) or not os.access(directory, os.W_OK):
        return f"{directory} is not writable by this worker: delegate it (systemd Delegate=yes, or chown)"
    return None


def prepare(directory: Path) -> None:
    """Move the processes in `directory` itself (this worker's) into `directory/worker` (cgroup
    v2 allows processes only in leaves once controllers are enabled below), then enable them."""
    pids = (directory / "cgroup.procs").read_text().split()
    if pids:
        leaf = directory / "worker"
        leaf.mkdir(exist_ok=True)
        for pid in pids:
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except OSError:  # exited meanwhile, or a kernel thread
                pass
    (directory / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))


def make(directory: Path, name: str, limits: dict[str, str]) -> str:
    """The cgroup `directory/name`, created, with each of `limits` ({"memory.max": ...}) written."""
    path = directory / name
    path.mkdir(exist_ok=True)
    for control, value in limits.items():
        (path / control).write_text(value)
    return str(path)


def cpu_share(index: int, slots: int, cpus: list[int]) -> str:
    """The CPUs of slot `index` of `slots`: `cpus` split into contiguous equal parts (a slot
    past the count wraps around; fewer CPUs than slots: one CPU each, shared)."""
    cpus = sorted(cpus)
    slots = max(1, slots)
    if len(cpus) < slots:
        return str(cpus[index % len(cpus)])
    per = len(cpus) // slots
    part = cpus[(index % slots) * per:(index % slots + 1) * per]
    return ",".join(map(str, part))
