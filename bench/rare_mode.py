"""False culprits when the machine has a rare slow mode (issue 8: no culprit without a step).

    python bench/rare_mode.py [--runs 200] [--workers 2]

A demo-like history (29 revisions; steps of -60% at 6 and -35% at 24 on one case, none on the
other; 15% per-sample noise, 10 samples a trial) where a fraction p of trials runs the target
at 0.4x its speed (seen on a CPU runner: the Python-heavy demo gemm slowed 2-3x while its BLAS
control did not). Prints, per p, how many simulated runs named a culprit with no planted step
in it, and the mean trials. Minimum effect 15%, as the CPU demo.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.bisect.history import load_history  # noqa: E402
from perfbisect.service.bisect.model import BisectConfig  # noqa: E402
from perfbisect.service.bisect.simulate import simulate  # noqa: E402

STEPS = (6, 24)


def history(p: float, shift: float = -0.6, cv: float = 0.15):
    rare = {"p": p, "shift": shift}
    return load_history({"commits": 28, "samples_per_trial": 10, "process_drift_cv": 0.02,
                         "control": {"value": 1.0, "cv": 0.01},
                         "cases": {"stepped": {"cv": cv, "levels": [[0, 0.5], [6, 0.2], [24, 0.13]], "bimodal": rare},
                                   "flat": {"cv": cv, "levels": [[0, 0.4]], "bimodal": rare}}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--p", type=float, nargs="+", default=[0.0, 0.05, 0.1])
    args = parser.parse_args()
    print(f"{'rare mode p':>11} {'runs with a false culprit':>26} {'mean trials':>12}")
    for p in args.p:
        false = trials = 0
        for seed in range(args.runs):
            result = simulate(history(p), workers=args.workers, seed=seed, config=BisectConfig(min_effect=0.15))
            trials += result["trials"]
            spans = [c["range"] for c in result["culprits"]]
            false += any(not any(lo <= s <= hi for s in STEPS) for lo, hi in spans)
        print(f"{p:>11.2f} {f'{false}/{args.runs}':>26} {trials / args.runs:>12.1f}")


if __name__ == "__main__":
    main()
