"""Spread and mode verdicts (issue 46) on simulated histories: found, false findings, extra trials.

    python bench/spread_accuracy.py [--runs 20] [--jobs 2]

Planted (each with a 20% speed step at 10 on the same case, a flat second case, min effect 5%,
W=2, side by side and not): `slow_path`, from revision 21 a tenth of the calls run twice as slow
(20 calls a trial); `noisier`, from 21 the calls' spread goes from 3% to 20% (tt-metal#53821).
Found: a finding of the right case whose range holds 21; false: any other finding. The
"varying spread" scenarios draw each trial's call-to-call spread (log sd 0.6, as measured on the
demo machine), side by side: "quiet varying spread" has only the speed step.

Quiet: the bench's histories with no spread or mode step (bench/histories/*.json, the rare-mode
history of bench/rare_mode.py at p 0.1: whole trials in a slow mode, and the noisy RMSNorm of
bench/noisy_case.py, side by side): every finding is false. Mean trials with the verdicts on
against off (`spread_ratio` 0) on the same seeds: what they cost where there is nothing to find.
"""

from __future__ import annotations

import argparse
import sys
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.bisect.history import History, load_history  # noqa: E402
from perfbisect.service.bisect.model import SIDE_BY_SIDE, BisectConfig  # noqa: E402
from perfbisect.service.bisect.simulate import simulate  # noqa: E402

HISTORIES = Path(__file__).resolve().parent / "histories"
STEP = 21
# One trial's robust spread varies with log sd 0.5-0.65 between trials of the same code on the
# 2-core demo machine (target and control alike): a lognormal cv of 0.66 is log sd 0.6.
VARYING = 0.66


def planted(kind: str, varying: float = 0.0) -> History:
    """The planted history of `kind` ("slow_path", "noisier" or "none": only the speed step), each
    trial's call-to-call spread a draw of cv `varying` (history.py's spread_trial_cv)."""
    case = {"cv": 0.03, "levels": [[0, 1.0], [10, 0.8]], "spread_trial_cv": varying}
    if kind == "slow_path":
        case["slow_path"] = {"from": STEP, "p": 0.1, "shift": 1.0}
    elif kind == "noisier":
        case["spread"] = [[STEP, 0.2]]
    return load_history({"commits": 40, "samples_per_trial": 20, "process_drift_cv": 0.02,
                         "control": {"value": 1.0, "cv": 0.01},
                         "cases": {"k": case, "flat": {"cv": 0.03, "levels": [[0, 0.5]], "spread_trial_cv": varying}}})


def rare_mode() -> History:
    rare = {"p": 0.1, "shift": -0.6}
    return load_history({"commits": 28, "samples_per_trial": 10, "process_drift_cv": 0.02,
                         "control": {"value": 1.0, "cv": 0.01},
                         "cases": {"stepped": {"cv": 0.15, "levels": [[0, 0.5], [6, 0.2], [24, 0.13]], "bimodal": rare},
                                   "flat": {"cv": 0.15, "levels": [[0, 0.4]], "bimodal": rare}}})


def scenarios() -> dict[str, tuple[History, BisectConfig, bool]]:
    """name -> (history, config, planted at STEP on case k)."""
    out = {}
    for kind in ("slow_path", "noisier"):
        for paired in (SIDE_BY_SIDE, 0):
            out[f"{kind} {'side by side' if paired else 'unpaired'}"] = (
                planted(kind), BisectConfig(min_effect=0.05, paired_blocks=paired, workers=2), True)
    for kind in ("slow_path", "noisier", "none"):  # each trial's spread a draw, as on the demo machine
        history = planted(kind, VARYING)
        name = f"{kind} varying spread" if kind != "none" else "quiet varying spread"
        out[name] = (history, BisectConfig(min_effect=0.05, paired_blocks=SIDE_BY_SIDE, workers=2), kind != "none")
    for path in sorted(HISTORIES.glob("*.json")):
        paired = SIDE_BY_SIDE if "noisy" in path.name else 0
        out[f"quiet {path.stem}"] = (load_history(path), BisectConfig(min_effect=0.15 if paired else 0.02,
                                                                     paired_blocks=paired), False)
    out["quiet rare_mode p=0.1"] = (rare_mode(), BisectConfig(min_effect=0.15, workers=2), False)
    return out


def one(job: tuple[str, int]) -> tuple[str, int, int, int, int]:
    """(scenario, found, false, trials on, trials off) of one seed."""
    name, seed = job
    history, config, has_step = scenarios()[name]
    on = simulate(history, workers=config.workers, seed=seed, config=config)
    off = simulate(history, workers=config.workers, seed=seed, config=BisectConfig(**{**config.__dict__, "spread_ratio": 0}))
    found = sum(has_step and f["case"] == "k" and f["range"][0] <= STEP <= f["range"][1] for f in on["shapes"])
    return name, min(found, 1), len(on["shapes"]) - found, on["trials"], off["trials"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    names = list(scenarios())
    with Pool(args.jobs) as pool:
        rows = pool.map(one, [(name, seed) for name in names for seed in range(args.runs)])
    print(f"{'scenario':<36} {'found':>7} {'runs with a false finding':>26} {'trials on':>10} {'off':>7}")
    for name in names:
        mine = [r for r in rows if r[0] == name]
        found = f"{sum(r[1] for r in mine)}/{len(mine)}" if not name.startswith("quiet") else "-"
        false = sum(r[2] > 0 for r in mine)
        print(f"{name:<36} {found:>7} {f'{false}/{len(mine)}':>26} {sum(r[3] for r in mine) / len(mine):>10.1f} "
              f"{sum(r[4] for r in mine) / len(mine):>7.1f}")


if __name__ == "__main__":
    main()
