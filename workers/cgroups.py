"""cgroup v2 limits of a sandbox slot, where the host delegates a cgroup subtree to the worker.

The operator gives the worker a cgroup v2 directory it may write (PERFBISECT_SANDBOX_CGROUP_DIR:
a systemd unit's own cgroup with `Delegate=yes`, or a directory chowned to the worker). Each
slot then gets `<dir>/slot-N` with
- memory.max: the slot's memory cap (hostshare.memory_cap_mb: 85% of the host's memory shared by
  its slots), counting what rlimits miss: page cache, pinned host memory, the slot's tmpfs;
- pids.max: PERFBISECT_SANDBOX_MAX_PROCS, whatever the uid (RLIMIT_NPROC needs a uid per slot);
- cpuset.cpus: the slot's share of this worker's CPUs (contiguous, equal parts).
Every build and trial of the slot (its fork server included) enters that cgroup before it
drops to the slot's uid (Containment.cgroup), so all it starts is counted there.

The worker's own processes move to `<dir>/worker` (cgroup v2 allows processes only in leaves
once controllers are enabled below). Where the directory is unset, not cgroup v2 or not
writable, the rlimits of workers/slotpolicy.py stand alone, said once in the log. This module
says which directory and which limits; kernels/harness/contain/cgroup.py writes them.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from pathlib import Path

from perfbisect.kernels.harness.contain import cgroup
from perfbisect.service.settings import Settings, get_settings
from perfbisect.workers import hostshare

log = logging.getLogger(__name__)


@lru_cache
def delegated() -> Path | None:
    """The delegated cgroup directory, prepared (controllers enabled below it, the worker's
    processes moved into a leaf); None, logged once per process, where there is none usable."""
    directory = get_settings().sandbox_cgroup_dir
    why = cgroup.unusable(directory)
    if why is not None:
        log.warning("cgroup v2 limits off (%s): slots are limited by rlimits only (memory: RLIMIT_AS or "
                    "RLIMIT_DATA, processes: RLIMIT_NPROC of a slot's uid, no CPU set)", why)
        return None
    cgroup.prepare(directory)
    return directory


def slot_cgroup(settings: Settings, index: int) -> str:
    """The cgroup of slot `index`, created and its limits written; "" where there is no
    delegated cgroup (rlimits only)."""
    directory = delegated()
    if directory is None:
        return ""
    memory_mb = hostshare.slot_budget_mb(settings)  # the slot's processes and its /tmp and /dev/shm
    limits = {"memory.max": str(memory_mb << 20) if memory_mb else "max",
              "pids.max": str(settings.sandbox_max_procs or "max"),
              "cpuset.cpus": cgroup.cpu_share(index, hostshare.host_slots(settings), list(os.sched_getaffinity(0)))}
    return cgroup.make(directory, f"slot-{index}", limits)


def memory_report(settings: Settings) -> str:
    """Which memory bound this host's slots get, in one line: the worker says it when it starts,
    `perfbisect doctor` shows it. Reads the delegated directory; changes nothing."""
    budget, tmpfs, cap = (hostshare.slot_budget_mb(settings), hostshare.tmpfs_mb(settings),
                          hostshare.memory_cap_mb(settings))
    slots, procs = hostshare.host_slots(settings), settings.sandbox_max_procs or "no limit on"
    shared = (f"{slots} slot(s) x {budget} MiB = {slots * budget} MiB of the host's {hostshare.host_memory_mb()} MiB; "
              f"/tmp and /dev/shm {tmpfs} MiB each, in the slot's budget")
    why = cgroup.unusable(settings.sandbox_cgroup_dir)
    if why is None:
        return (f"memory: bounded per trial by cgroup v2 ({settings.sandbox_cgroup_dir}): memory.max {budget} MiB "
                f"and pids.max {procs} per slot, all its processes and its /tmp and /dev/shm counted; {shared}")
    return (f"memory: bounded per process only ({why}): {cap} MiB per process (RLIMIT_AS, RLIMIT_DATA for GPU "
            f"trials and builds) and {procs} processes per slot uid (RLIMIT_NPROC), so a trial's N processes may "
            f"hold N x {cap} MiB; {shared}")
