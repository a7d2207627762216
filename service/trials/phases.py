"""Where trial time goes, over many trials: pure, for the job page and the benches.

    phase_table([trial.phases, ...]) -> [PhaseRow(name, median_s, share), ...]
    build_cache_summary([trial.build_cache, ...]) -> "4 built, 8 from the build cache" or None
        (with the incremental builds' compiler cache hits, misses and build seconds saved)
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


def build_cache_summary(builds: list[dict[str, Any] | None]) -> str | None:
    """What the build cache did over a job's trials, in words; None when no trial used it (the
    repository declares no build inputs)."""
    used = [b for b in builds if b]
    if not used:
        return None
    cached = sum(1 for b in used if b.get("cached"))
    stored = sum(1 for b in used if b.get("stored"))
    refused = sorted({b["note"].split("not cached: ", 1)[1] for b in used
                      if not b.get("cached") and "not cached: " in (b.get("note") or "")})
    words = f"{len(used) - cached} built ({stored} stored), {cached} from the build cache"
    return words + "".join(f"; not cached: {reason}" for reason in refused[:3]) + incremental_summary(used)


def incremental_summary(builds: list[dict[str, Any]]) -> str:
    """`; incremental: 3 of 4 on a reused tree, compiler cache 12 hits, 3 misses, ~80 s of build
    saved` over the builds that were incremental (workers/buildtree.py); "" where none was."""
    done = [b["incremental"] for b in builds if isinstance(b.get("incremental"), dict)]
    if not done:
        return ""
    reused = sum(1 for i in done if i.get("tree_reused"))
    hits, misses = sum(int(i.get("hits") or 0) for i in done), sum(int(i.get("misses") or 0) for i in done)
    saved = sum(float(i.get("saved_s") or 0.0) for i in done)
    return (f"; incremental: {reused} of {len(done)} on a reused tree, compiler cache {hits} hits, {misses} misses, "
            f"~{saved:.0f} s of build saved")
