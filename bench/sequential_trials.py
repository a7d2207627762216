"""Trials to culprit on the issue-12 simulator histories (bench/histories/*.json).

    python bench/sequential_trials.py [--seeds N] [--workers 1 4]

For every history and W: trials, revisions measured and rounds (mean and max over seeds), and
how many seeds named exactly the planted culprit(s) and nothing else. Targets of issue 12: at
most 14 trials on `large_step_two_cases` (a 3.3x step on two cases, today 36) and at most 18 on
`step_8pct_cv1` (an 8% step with 1% per-sample noise, today 34).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.bisect.history import load_history  # noqa: E402
from perfbisect.service.bisect.simulate import simulate  # noqa: E402

HISTORIES = Path(__file__).resolve().parent / "histories"


def planted(history) -> list[int]:
    """Revisions where some case's level changes."""
    return sorted({start for case in history.cases.values() for start, _ in case.levels[1:]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    print(f"{'history':<24} {'W':>2} {'trials mean':>11} {'max':>4} {'revisions':>9} {'rounds':>6} {'exact':>7}")
    for path in sorted(HISTORIES.glob("*.json")):
        history = load_history(path)
        truth = planted(history)
        for w in args.workers:
            runs = [simulate(history, workers=w, seed=s) for s in range(args.seeds)]
            exact = sum([c["revision"] for c in r["culprits"]] == truth for r in runs)
            trials = [r["trials"] for r in runs]
            print(f"{path.stem:<24} {w:>2} {np.mean(trials):>11.1f} {max(trials):>4} "
                  f"{np.mean([r['revisions_measured'] for r in runs]):>9.1f} "
                  f"{np.mean([r['rounds'] for r in runs]):>6.1f} {exact:>4}/{len(runs)}")


if __name__ == "__main__":
    main()
