"""The issue-46 scenarios: the search phase under round drift the control does not cancel.

    python bench/search_drift.py [--runs 60] [--jobs 1]

Each scenario is the issue's independent simulation: 500 commits, one case with 2% per-sample
noise, 20 samples a trial, 1% control noise, steps of the given size (the target slower) at
random revisions, a 5% minimum effect and a lognormal round drift of the given cv on the target
only; W = 1. Run `--runs` times each (history seed [46, run], simulator seed run) with issue 23's
planner (culprits side by side, the search on unpaired trials: "before") and issue 46's (the
search side by side too: "after"). Prints runs that missed a step, runs with a false culprit and
the mean trials.
"""

from __future__ import annotations

import argparse
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.bisect.history import load_history  # noqa: E402
from perfbisect.service.bisect.model import SIDE_BY_SIDE, BisectConfig  # noqa: E402
from perfbisect.service.bisect.simulate import simulate  # noqa: E402

COMMITS = 500
MIN_EFFECT = 0.05
SCENARIOS = (("an 8% step, 2% round drift", (0.08,), 0.02),
             ("two 8% steps, 3% round drift", (0.08, 0.08), 0.03),
             ("a 10% step, 4% round drift", (0.10,), 0.04))
PLANNERS = {"before (issue 23)": False, "after (issue 46)": True}


def history(run: int, steps: tuple[float, ...], drift: float) -> tuple[dict, list[int]]:
    """The scenario's history for one run, and where its steps are."""
    rng = np.random.default_rng([46, run])
    at = sorted(rng.choice(np.arange(1, COMMITS + 1), size=len(steps), replace=False).tolist())
    levels = [[0, 1000.0]]
    for revision, size in zip(at, steps):
        levels.append([revision, levels[-1][1] * (1 - size)])
    return ({"commits": COMMITS, "samples_per_trial": 20, "process_drift_cv": 0.02,
             "control": {"value": 1000.0, "cv": 0.01}, "cases": {"k": {"cv": 0.02, "levels": levels}},
             "drift": {"round_cv": drift}}, at)


def one(args: tuple[int, tuple[float, ...], float, bool]) -> tuple[bool, bool, int]:
    """(missed a step, named a false culprit, trials) of one run."""
    run, steps, drift, search = args
    data, at = history(run, steps, drift)
    config = BisectConfig(min_effect=MIN_EFFECT, paired_blocks=SIDE_BY_SIDE, search_side_by_side=search)
    result = simulate(load_history(data), workers=1, seed=run, config=config)
    ranges = [c["range"] for c in result["culprits"]]
    missed = any(not any(lo <= s <= hi for lo, hi in ranges) for s in at)
    false = any(not any(lo <= s <= hi for s in at) for lo, hi in ranges)
    return missed, false, result["trials"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    print(f"{'scenario':<30} {'planner':<18} {'runs missing a step':>20} {'false culprit':>14} {'trials':>7}")
    with Pool(args.jobs) as pool:
        for label, steps, drift in SCENARIOS:
            for name, search in PLANNERS.items():
                rows = pool.map(one, [(run, steps, drift, search) for run in range(args.runs)])
                print(f"{label:<30} {name:<18} {sum(r[0] for r in rows):>12} of {args.runs:<5} "
                      f"{sum(r[1] for r in rows):>14} {np.mean([r[2] for r in rows]):>7.1f}", flush=True)


if __name__ == "__main__":
    main()
