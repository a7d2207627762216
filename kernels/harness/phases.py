"""Where a trial's wall time goes, phase by phase (seconds), recorded in every result.

Worker side: checkout, build. Parent side: start (launch until the harness's main runs: the
interpreter start, or the fork), teardown (the rest, until the process is seen to exit).
Child side: import (torch when not preloaded, the device context, the target), compile (the
first call of each case, which JIT-compiles), inputs_reference (making the inputs, the accuracy
reference), timing (warm-up and timed samples, flushes included). Besides the phases:
first_sample (launch until the first timed sample), timed_kernels (the sum of the timed calls
themselves) and total.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

WORKER_PHASES = ("checkout", "build")
CHILD_PHASES = ("import", "compile", "inputs_reference", "timing")
PHASES = ("checkout", "build", "start", *CHILD_PHASES, "teardown")


class PhaseClock:
    """Accumulates seconds per phase (a phase may run once per case)."""

    def __init__(self):
        self.seconds = dict.fromkeys(CHILD_PHASES, 0.0)
        self.first_sample_at: float | None = None  # time.time() of the first timed sample

    @contextmanager
    def track(self, phase: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - started

    def mark_first_sample(self) -> None:
        if self.first_sample_at is None:
            self.first_sample_at = time.time()

    def as_dict(self) -> dict:
        return {name: round(value, 4) for name, value in self.seconds.items()}


def close_phases(child: dict | None, launched_at: float, entered_at: float | None,
                 first_sample_at: float | None, exited_at: float) -> dict:
    """The trial process's phases: the child's, plus start and teardown from the parent's
    clock (one machine, so time.time() of parent and child compare)."""
    phases = {name: (child or {}).get(name, 0.0) for name in CHILD_PHASES}
    wall = max(0.0, exited_at - launched_at)
    start = max(0.0, entered_at - launched_at) if entered_at else 0.0
    phases["start"] = round(start, 4)
    phases["teardown"] = round(max(0.0, wall - start - sum(phases[n] for n in CHILD_PHASES)), 4)
    if first_sample_at:
        phases["first_sample"] = round(first_sample_at - launched_at, 4)
    phases["process"] = round(wall, 4)
    return phases


def timed_kernel_seconds(cases: list[dict]) -> float:
    """The time spent inside timed calls (target and control), the useful part of a trial."""
    return sum(sum(c.get("target_ms") or []) + sum(c.get("control_ms") or []) for c in cases) / 1e3


def add_worker_phases(result: dict, checkout_s: float, build_s: float | None) -> dict:
    """Complete a result's phases with the worker's checkout and build, and the totals."""
    phases = dict(result.get("phases") or {})
    phases["checkout"] = round(checkout_s, 4)
    phases["build"] = round(build_s or 0.0, 4)
    phases["total"] = round(sum(phases.get(name, 0.0) for name in PHASES), 4)
    phases["timed_kernels"] = round(timed_kernel_seconds(result.get("cases") or []), 4)
    result["phases"] = phases
    return result
