"""Where trial time goes, over many trials: pure, for the job page and the benches.

    phase_table([trial.phases, ...]) -> [PhaseRow(name, median_s, share), ...]
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

# The order a trial goes through them (kernels/harness/phases.py records them).
PHASES = ("checkout", "build", "start", "import", "compile", "inputs_reference", "timing", "teardown")
EXTRAS = ("timed_kernels", "first_sample", "total")


@dataclass(frozen=True)
class PhaseRow:
    name: str
    median_s: float
    share: float | None  # of the summed medians of the phases; None for the extras


def phase_table(phases: list[dict[str, Any] | None]) -> list[PhaseRow]:
    """Median seconds per phase over the trials that recorded phases, and each phase's share
    of the trial; then timed kernel time (its share: the useful part), time to the first
    sample and the total. Empty when no trial recorded phases."""
    recorded = [p for p in phases if p]
    if not recorded:
        return []
    medians = {name: statistics.median(float(p.get(name) or 0.0) for p in recorded)
               for name in PHASES + EXTRAS}
    whole = sum(medians[name] for name in PHASES)
    rows = [PhaseRow(name, medians[name], medians[name] / whole if whole else None) for name in PHASES]
    rows.append(PhaseRow("timed_kernels", medians["timed_kernels"],
                         medians["timed_kernels"] / whole if whole else None))
    rows += [PhaseRow(name, medians[name], None) for name in ("first_sample", "total")]
    return rows
