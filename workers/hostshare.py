"""How much of this host one sandbox slot gets: the number of slots (trials at once), the slot's
memory budget, and how that budget is split between the private /tmp and /dev/shm (tmpfs: RAM,
counted by no rlimit) and the memory cap of each process of the slot's builds and trials."""

from __future__ import annotations

import os

from perfbisect.service.settings import Settings
from perfbisect.kernels.harness.contain import bwrap

TMPFS_MAX_MB = 1024
TMPFS_SHARE = 8  # each of /tmp and /dev/shm gets at most this fraction of the slot's budget


def host_slots(settings: Settings) -> int:
    """How many trials this host runs at once: the setting, else one per GPU, else per core."""
    return settings.sandbox_slots or len(bwrap.nvidia_minors()) or os.cpu_count() or 1


def host_memory_mb() -> int:
    """This host's memory (0: unknown)."""
    try:
        return (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) >> 20
    except (ValueError, OSError):
        return 0


def slot_budget_mb(settings: Settings) -> int:
    """The memory of one slot: the setting (PERFBISECT_TRIAL_MEMORY_MB), else 85% of this host's
    memory shared by its slots, so that all slots together stay within the host's (0: none)."""
    if settings.trial_memory_mb is not None:
        return settings.trial_memory_mb
    return int(host_memory_mb() * 0.85 / host_slots(settings))


def tmpfs_mb(settings: Settings) -> int:
    """The size of each of a slot's /tmp and /dev/shm: an eighth of its budget, at most 1 GiB."""
    budget = slot_budget_mb(settings)
    return min(TMPFS_MAX_MB, budget // TMPFS_SHARE) if budget else TMPFS_MAX_MB


def memory_cap_mb(settings: Settings) -> int:
    """The memory cap of one process of a build or trial: the slot's budget less its two tmpfs,
    so that a process and what the slot holds in /tmp and /dev/shm fit the budget (0: none)."""
    budget = slot_budget_mb(settings)
    return max(1, budget - 2 * tmpfs_mb(settings)) if budget else 0
