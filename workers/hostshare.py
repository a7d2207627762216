"""How much of this host one sandbox slot gets: the number of slots (trials at once) and the
memory cap of one build or trial derived from it."""

from __future__ import annotations

import os

from perfbisect.service.settings import Settings
from perfbisect.workers import namespaces


def host_slots(settings: Settings) -> int:
    """How many trials this host runs at once: the setting, else one per GPU, else per core."""
    return settings.sandbox_slots or len(namespaces.nvidia_minors()) or os.cpu_count() or 1


def memory_cap_mb(settings: Settings) -> int:
    """The memory cap of one build or trial: the setting, else 85% of this host's memory shared
    by its slots (0: none)."""
    if settings.trial_memory_mb is not None:
        return settings.trial_memory_mb
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return int(total * 0.85 / host_slots(settings)) >> 20
