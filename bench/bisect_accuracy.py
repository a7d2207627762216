"""Bisection accuracy benchmark (issue 4): the planner against random simulated histories,
beside two baselines, for W = 1, 4 and 8 workers.

    python bench/bisect_accuracy.py [--quick] [--histories N] [--jobs J]
    python bench/bisect_accuracy.py --drift [--histories N] [--jobs J] [--first K] [--save F] [--load F]
                                                                         (issue 23)
    python bench/bisect_accuracy.py --builds [--histories N] [--jobs J]   (issue 45)

Histories: 30 to 2000 commits (log-uniform), 0 to 4 steps of 1% to 30% (log-uniform; each on a
random non-empty subset of 1 to 3 cases; a later step may partly undo an earlier one), per-sample
cv 0.5% to 13% (log-uniform, per case), 20 samples per trial, drift cv 2% (cancelled by the control
ratio), control cv 1%; a quarter of the cases bimodal (p 0.1, shift +-3..10%), a third of the
histories with an unbuildable run of 1 to 5 revisions (half of them placed over a step).

Scoring: a reported culprit is right if its range holds a true step (any size). Recall counts the
steps at least three times the noise of a trial's decision value on their clearest case
("detectable"), and separately those also at least the job's minimum effect (2%). The bound on
revisions built is k*ceil(log2 N) + 2k + 2 for k true steps in N commits.

`--drift` runs the same random histories with drift the control does not cancel (target only,
`history.DriftModel`): a per-round lognormal factor of cv uniform in 0..0.6x the minimum effect,
10% burst rounds slowing the target by 3x the minimum effect, a trend of up to 0.3x the minimum
effect per 50 trials, per-worker offsets of cv up to 0.5x the minimum effect, and (issue 46) a factor
per block inside a round and one per trial, each of cv up to 0.3x the minimum effect; W = 1 and 4.
The planners: issue 23's (culprits confirmed side by side, the search on unpaired trials: "before")
and issue 46's (the search side by side too: "after"); `--today` adds the planner without blocks.
It prints the issue's targets: runs with a false culprit, steps >= 1.5x the minimum effect (and
>= 3 trial noises, not cancelled) found, interval coverage, and trials beside the drift-free runs
of the same planner and of today's (no blocks). A long run is resumable: `--save F` appends each
history's rows to F (JSON lines) as it finishes, `--load F` reads them back and skips those
histories, `--first K` starts at history K (histories K..K+N-1).

`--builds` gives each random history a compiled library's build costs (`random_build`) and
runs it three ways at W = 1: every revision a full build with midpoint probes (today), incremental
builds (a rebuild costs what the commits since the nearest built revision touched, `buildcost`),
and incremental builds with cost-aware probes; it prints trials, builds, build and simulated wall
hours, the revision bound and whether the culprits are the same.

Baselines (one culprit each, run on every history, on the case that moved most end to end):
- git-bisect: one sample of the raw target per revision, bad when nearer the bad end's sample;
- FlyDSL's skill: median of 3 runs (trial medians of the raw target) per revision, bad when beyond
  30% of the good-to-bad gap. Both skip unbuildable revisions like `git bisect skip`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from multiprocessing import Pool
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.bisect.history import BuildModel, History, load_history  # noqa: E402
from perfbisect.service.bisect.model import SIDE_BY_SIDE, BisectConfig  # noqa: E402
from perfbisect.service.bisect.simulate import simulate  # noqa: E402

MIN_EFFECT = 0.02


@dataclass(frozen=True)
class Truth:
    history: History
    steps: tuple[int, ...]                 # revisions where some case changes level
    detectable: tuple[bool, ...]           # >= 3 x trial noise on its clearest case
    above_min: tuple[bool, ...]            # ... and >= the minimum effect
    sizes: tuple[float, ...] = field(default=())
    cancelled: tuple[bool, ...] = ()       # undone by a neighbouring step (see `_cancelled`)


def random_drift(rng: np.random.Generator) -> dict:
    """The drift the control does not cancel, for `--drift` (see the module docstring)."""
    return {"round_cv": float(rng.uniform(0, 0.6 * MIN_EFFECT)), "burst_p": 0.1, "burst": 3 * MIN_EFFECT,
            "trend": float(rng.uniform(0, 0.3 * MIN_EFFECT / 50)), "worker_cv": float(rng.uniform(0, 0.5 * MIN_EFFECT)),
            "block_cv": float(rng.uniform(0, 0.3 * MIN_EFFECT)), "trial_cv": float(rng.uniform(0, 0.3 * MIN_EFFECT))}


def random_history(rng: np.random.Generator, drift: dict | None = None) -> Truth:
    commits = int(round(math.exp(rng.uniform(math.log(30), math.log(2000)))))
    n = commits + 1
    k = int(rng.integers(0, 5))
    steps = sorted(rng.choice(np.arange(1, n), size=k, replace=False).tolist()) if k else []
    n_cases = int(rng.integers(1, 4))
    names = [f"case{j}" for j in range(n_cases)]
    cvs = {c: math.exp(rng.uniform(math.log(0.005), math.log(0.13))) for c in names}
    cases, per_step = {}, []
    levels = {c: [[0, 1000.0]] for c in names}
    for s in steps:
        size = math.exp(rng.uniform(math.log(0.01), math.log(0.30)))
        sign = -1.0 if rng.random() < 0.7 else 1.0
        hit = [c for c in names if rng.random() < 0.6] or [names[int(rng.integers(n_cases))]]
        per_step.append((s, sign * size, hit))
        for c in hit:
            levels[c].append([s, levels[c][-1][1] * (1 + sign * size)])
    bimodal = {c: {"p": 0.1, "shift": float(rng.choice([-1, 1]) * rng.uniform(0.03, 0.10))}
               for c in names if rng.random() < 0.25}
    for c in names:
        cases[c] = {"cv": cvs[c], "levels": levels[c], **({"bimodal": bimodal[c]} if c in bimodal else {})}
    unbuildable: list[int] = []
    if rng.random() < 1 / 3 and n > 12:
        length = int(rng.integers(1, 6))
        if steps and rng.random() < 0.5:
            start = max(1, min(n - 1 - length, steps[int(rng.integers(len(steps)))] - int(rng.integers(0, length))))
        else:
            start = int(rng.integers(1, n - 1 - length))
        unbuildable = list(range(start, start + length))
    history = load_history({"commits": commits, "samples_per_trial": 20, "process_drift_cv": 0.02,
                            "control": {"value": 1000.0, "cv": 0.01}, "cases": cases,
                            "unbuildable": unbuildable, "higher_is_better": True, "drift": drift or {}})
    ratios = [max(abs(math.log1p(m)) / history.trial_noise(c) for c in hit) for _, m, hit in per_step]
    return Truth(history, tuple(steps), tuple(r >= 3 for r in ratios),
                 tuple(r >= 3 and abs(m) >= MIN_EFFECT for r, (_, m, _) in zip(ratios, per_step)),
                 tuple(m for _, m, _ in per_step), _cancelled(history, steps))


def _visible(history: History, lo: int, hi: int) -> bool:
    """Whether revisions lo and hi differ by more than the engine can see on some case (the
    minimum effect raised to 2 trial noises, as the planner does)."""
    return any(abs(math.log(m.level_at(hi) / m.level_at(lo))) >= math.log1p(max(MIN_EFFECT, math.expm1(2 * history.trial_noise(c))))
               for c, m in history.cases.items())


def _cancelled(history: History, steps: list[int]) -> tuple[bool, ...]:
    """A step is cancelled when the ends of the range show nothing, or when it and its neighbour
    step together leave no visible change (a drop and its recovery with no build in between
    that a bisection would ever compare)."""
    if not _visible(history, 0, history.n_revisions - 1):
        return tuple(True for _ in steps)
    flags = [False] * len(steps)
    for j in range(len(steps) - 1):
        if not _visible(history, steps[j] - 1, steps[j + 1]):
            flags[j] = flags[j + 1] = True
    return tuple(flags)


def _raw_trial(history: History, revision: int, case: str, rng: np.random.Generator, samples: int | None) -> float:
    """A raw target value: one sample (samples=1) or one trial's median."""
    drift = math.exp(rng.normal(0, history.process_drift_cv))
    model = history.cases[case]
    mode = 1 + model.bimodal_shift if rng.random() < model.bimodal_p else 1.0
    noise = np.exp(rng.normal(0, model.cv, samples or history.samples_per_trial))
    return float(np.median(model.level_at(revision) * drift * mode * noise))


def baseline(history: History, rng: np.random.Generator, runs: int, threshold: float) -> dict:
    """One-culprit bisect: `runs` trials per revision (runs=1: a single sample, git-bisect),
    bad when the value has moved more than `threshold` of the good-to-bad gap."""
    n = history.n_revisions
    case = max(history.cases, key=lambda c: abs(math.log(history.cases[c].level_at(n - 1) / history.cases[c].level_at(0))))
    samples = 1 if runs == 1 else None
    built = set()

    def value(r: int) -> float | None:
        built.add(r)
        if r in history.unbuildable:
            return None
        return float(np.median([_raw_trial(history, r, case, rng, samples) for _ in range(runs)]))

    good, bad = value(0), value(n - 1)
    lo, hi = 0, n - 1
    skipped: set[int] = set()
    while True:
        candidates = [r for r in range(lo + 1, hi) if r not in skipped]
        if not candidates:
            break
        mid = min(candidates, key=lambda r: abs(r - (lo + hi) / 2))
        v = value(mid)
        if v is None:
            skipped.add(mid)
            continue
        is_bad = abs(v - good) > threshold * abs(bad - good)
        lo, hi = (lo, mid) if is_bad else (mid, hi)
    return {"culprits": [[lo + 1, hi]], "revisions": len(built), "trials": len(built) * runs, "rounds": len(built)}


def score(truth: Truth, culprits: list[list[int]]) -> dict:
    right = sum(any(lo <= s <= hi for s in truth.steps) for lo, hi in culprits)
    found = [any(lo <= s <= hi for lo, hi in culprits) for s in truth.steps]
    missed = [not f and big for f, big in zip(found, truth.above_min)]
    return {"reported": len(culprits), "right": right,
            "miss_flat": sum(m and c for m, c in zip(missed, truth.cancelled)),
            "miss_edge": sum(m and not c and abs(size) < 1.25 * MIN_EFFECT
                             for m, c, size in zip(missed, truth.cancelled, truth.sizes)),
            "miss_other": sum(m and not c and abs(size) >= 1.25 * MIN_EFFECT
                              for m, c, size in zip(missed, truth.cancelled, truth.sizes)),
            "vis": sum(b and not c for b, c in zip(truth.above_min, truth.cancelled)),
            "vis_found": sum(f and b and not c for f, b, c in zip(found, truth.above_min, truth.cancelled)),
            "det": sum(truth.detectable), "det_found": sum(f for f, d in zip(found, truth.detectable) if d),
            "big": sum(truth.above_min), "big_found": sum(f for f, d in zip(found, truth.above_min) if d)}


def intervals(history: History, culprits: list[dict]) -> list[tuple[bool, bool]]:
    """Per reported culprit and case: (the case truly moved, its interval holds the true step).
    The true step is the level after the culprit's range over the level before it (the decision
    value is target/control, whose true median moves by exactly that ratio). The simulator rounds
    the interval to 4 decimals, so a bound within 5e-5 of the truth counts as holding it."""
    rows = []
    for c in culprits:
        lo, hi = c["range"]
        for name, effect in c["cases"].items():
            model = history.cases[name]
            true = model.level_at(hi) / model.level_at(lo - 1) - 1.0
            low, high = effect["ci"]
            rows.append((abs(true) > 1e-12, low - 5e-5 <= true <= high + 5e-5))
    return rows


def coverage_line(rows: list[dict], methods: list[str]) -> str:
    """Share of 95% intervals holding the true step, over every culprit x case and over the
    cases that moved."""
    parts = []
    for m in methods:
        ivs = [iv for r in rows if r["method"] == m for iv in r["intervals"]]
        moved = [held for is_moved, held in ivs if is_moved]
        parts.append(f"{m}: {np.mean([held for _, held in ivs]) if ivs else float('nan'):.1%} of {len(ivs)} "
                     f"(moved cases {np.mean(moved) if moved else float('nan'):.1%} of {len(moved)})")
    return "95% interval coverage of the true step: " + "; ".join(parts)


def run_one(args: tuple[int, tuple[int, ...]]) -> list[dict]:
    index, workers_list = args
    rng = np.random.default_rng([20261202, index])
    truth = random_history(rng)
    n, k = truth.history.n_revisions, len(truth.steps)
    bound = k * math.ceil(math.log2(n - 1)) + 2 * k + 2
    rows = []
    for w in workers_list:
        r = simulate(truth.history, workers=w, seed=index)
        rows.append({"method": f"perfbisect W={w}", "revisions": r["revisions_measured"], "trials": r["trials"],
                     "rounds": r["rounds"], "bound": bound, "intervals": intervals(truth.history, r["culprits"]),
                     **score(truth, [c["range"] for c in r["culprits"]])})
    for name, runs, threshold in (("git-bisect 1 sample", 1, 0.5), ("FlyDSL median-of-3", 3, 0.3)):
        b = baseline(truth.history, np.random.default_rng([7, index]), runs, threshold)
        rows.append({"method": name, "revisions": b["revisions"], "trials": b["trials"], "rounds": b["rounds"],
                     "bound": bound, **score(truth, b["culprits"])})
    return rows


PLANNERS = {"no blocks": BisectConfig(),
            "before (issue 23)": BisectConfig(paired_blocks=SIDE_BY_SIDE, search_side_by_side=False),
            "after (issue 46)": BisectConfig(paired_blocks=SIDE_BY_SIDE)}


def run_drift(args: tuple[int, bool]) -> list[dict]:
    """One random history with drift (the same history as `run_one` draws, plus drift), W=1 and 4,
    issue 23's planner ("before") and issue 46's ("after"), and the planner without blocks when
    `today`; the trials of each on the history without drift, beside those of "before"."""
    index, today = args
    drift = random_drift(np.random.default_rng([23, index]))
    truth = random_history(np.random.default_rng([20261202, index]), drift)
    clean = random_history(np.random.default_rng([20261202, index])).history
    base = PLANNERS["before (issue 23)"]
    today_quiet = {w: simulate(clean, workers=w, seed=index, config=base)["trials"] for w in (1, 4)}
    rows = []
    for (name, config), w in itertools.product(list(PLANNERS.items())[0 if today else 1:], (1, 4)):
        r = simulate(truth.history, workers=w, seed=index, config=config)
        quiet = today_quiet[w] if config == base else simulate(clean, workers=w, seed=index, config=config)["trials"]
        culprits = [c["range"] for c in r["culprits"]]
        s = score(truth, culprits)
        found = [any(lo <= step <= hi for lo, hi in culprits) for step in truth.steps]
        wanted = [big and not c and abs(size) >= 1.5 * MIN_EFFECT
                  for big, c, size in zip(truth.above_min, truth.cancelled, truth.sizes)]
        rows.append({"method": f"{name} W={w}", "false": s["reported"] - s["right"],
                     "index": index, "trials": r["trials"], "quiet": quiet, "today_quiet": today_quiet[w],
                     "wanted": sum(wanted), "wanted_found": sum(f for f, w_ in zip(found, wanted) if w_),
                     "intervals": intervals(truth.history, r["culprits"])})
    return rows


def summarize_drift(rows: list[dict]) -> str:
    """The issue-23 and issue-46 targets, per planner and W and over all W of a planner, beside the
    drift-free trials of the same planner and of issue 23's ("before": today's) on the same histories."""
    out = [f"{'planner':<26} {'runs':>5} {'false-culprit runs':>18} {'steps>=1.5x found':>18} "
           f"{'95% CI covers':>14} {'trials (drift)':>14} {'trials (no drift)':>17} {'before (no drift)':>17} {'ratio':>6}"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    planners = list(dict.fromkeys(m.rsplit(" W=", 1)[0] for m in methods))
    groups = [(m, [r for r in rows if r["method"] == m]) for m in methods]
    groups += [(f"{p} all W", [r for r in rows if r["method"].rsplit(" W=", 1)[0] == p]) for p in planners]
    for name, sel in groups:
        wanted, found = sum(r["wanted"] for r in sel), sum(r["wanted_found"] for r in sel)
        moved = [held for r in sel for is_moved, held in r["intervals"] if is_moved]
        quiet, today = np.mean([r["quiet"] for r in sel]), np.mean([r["today_quiet"] for r in sel])
        false = sum(r["false"] > 0 for r in sel)
        out.append(f"{name:<26} {len(sel):>5} {false / len(sel):>11.2%} ({false:>3}) "
                   f"{found / max(wanted, 1):>11.2%} of {wanted:<4} {np.mean(moved) if moved else float('nan'):>14.1%} "
                   f"{np.mean([r['trials'] for r in sel]):>14.1f} {quiet:>17.1f} {today:>17.1f} {quiet / today:>5.2f}x")
    out.append("targets (issue 46): false-culprit runs <= 0.5%, steps >= 1.5x min effect found >= 97%, "
               "drift-free trials <= 1.2x before's (issue 23: coverage >= 93%)")
    return "\n".join(out)


def _load(path: str | None) -> list[dict]:
    """Rows saved by an earlier `--save` run (one history's rows a line); none without a file."""
    if path is None or not Path(path).exists():
        return []
    return [row for line in Path(path).read_text().splitlines() if line.strip() for row in json.loads(line)]


def drift_bench(args: argparse.Namespace, count: int, pool: Pool, start: float) -> None:
    """`--drift`: histories first..first+count-1 (less those loaded), each history's rows appended
    to `--save` as it finishes, so an interrupted run resumes with `--load` the same file."""
    rows = _load(args.load)
    done_before = {r["index"] for r in rows}
    todo = [(i, args.today) for i in range(args.first, args.first + count) if i not in done_before]
    print(f"{len(done_before)} histories loaded, {len(todo)} to run", flush=True)
    save = open(args.save, "a") if args.save else None
    try:
        for done, batch in enumerate(pool.imap_unordered(run_drift, todo), 1):
            rows.extend(batch)
            if save is not None:
                save.write(json.dumps(batch) + "\n")
                save.flush()
            if done % 100 == 0 and done < len(todo):
                print(f"after {done} histories ({time.time() - start:.0f} s):\n{summarize_drift(rows)}", flush=True)
    finally:
        if save is not None:
            save.close()
    print(f"{len({r['index'] for r in rows})} histories:\n{summarize_drift(rows)}")


def random_build(rng: np.random.Generator, n: int) -> BuildModel:
    """`--builds`: a compiled library's build costs. A full build of 120 to 1200 s; a commit
    touches one or two translation units with probability 0.25 (5% to 15% of a full build each),
    a header or build file (a full build) with 0.03, else only Python or tests; a trial 10 s."""
    full = float(math.exp(rng.uniform(math.log(120), math.log(1200))))
    touch = []
    for _ in range(n):
        u = rng.random()
        units = int(rng.integers(1, 3)) if u < 0.25 else 0
        touch.append(full if u > 0.97 else units * full * float(rng.uniform(0.05, 0.15)))
    return BuildModel(tuple(touch), full, 10.0)


BUILD_METHODS = (("full builds", False, False), ("incremental", True, False), ("incremental+cost-aware", True, True))


def run_builds(index: int) -> list[dict]:
    """One random history with a build model (`--builds`), W=1: full builds, incremental builds
    with midpoint probes, incremental builds with cost-aware probes."""
    truth = random_history(np.random.default_rng([20261202, index]))
    history = replace(truth.history, build=random_build(np.random.default_rng([45, index]), truth.history.n_revisions))
    n, k = history.n_revisions, len(truth.steps)
    bound = k * math.ceil(math.log2(n - 1)) + 2 * k + 2
    rows = []
    for name, incremental, aware in BUILD_METHODS:
        r = simulate(history, workers=1, seed=index, incremental=incremental, cost_aware=aware)
        rows.append({"method": name, "index": index, "revisions": r["revisions_measured"], "trials": r["trials"],
                     "bound": bound, "builds": r["builds"], "build_s": r["build_s"], "wall_s": r["wall_s"],
                     "culprits": [c["range"] for c in r["culprits"]],
                     **score(truth, [c["range"] for c in r["culprits"]])})
    return rows


def summarize_builds(rows: list[dict]) -> str:
    """Per method: precision, recall (>= 3 trial noises and 2%), revisions and the bound, trials,
    builds, build hours and simulated wall hours; and how often the culprits equal midpoint's."""
    out = [f"{'method':<24} {'precision':>9} {'recall':>7} {'revisions':>9} {'within bound':>12} {'trials':>7} "
           f"{'builds':>6} {'build h':>8} {'wall h':>7} {'same culprits':>13}"]
    by_index = {(r["method"], r["index"]): r for r in rows}
    for name, _, _ in BUILD_METHODS:
        sel = [r for r in rows if r["method"] == name]
        rep, right = sum(r["reported"] for r in sel), sum(r["right"] for r in sel)
        big, big_f = sum(r["big"] for r in sel), sum(r["big_found"] for r in sel)
        same = np.mean([r["culprits"] == by_index[("incremental", r["index"])]["culprits"] for r in sel])
        out.append(f"{name:<24} {right / max(rep, 1):>9.3f} {big_f / max(big, 1):>7.3f} "
                   f"{np.mean([r['revisions'] for r in sel]):>9.1f} {np.mean([r['revisions'] <= r['bound'] for r in sel]):>12.1%} "
                   f"{np.mean([r['trials'] for r in sel]):>7.1f} {np.mean([r['builds'] for r in sel]):>6.1f} "
                   f"{sum(r['build_s'] for r in sel) / 3600:>8.1f} {sum(r['wall_s'] for r in sel) / 3600:>7.1f} {same:>13.1%}")
    out.append(f"({len(rows) // len(BUILD_METHODS)} histories; build and wall hours summed over them)")
    return "\n".join(out)


def summarize(rows: list[dict]) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out = [f"{'method':<22} {'precision':>9} {'recall>=3sd':>11} {'recall>=3sd&2%':>14} {'..not cancelled':>15} "
           f"{'revisions':>9} {'within bound':>12} {'trials':>7} {'rounds':>6}"]
    for m in methods:
        sel = [r for r in rows if r["method"] == m]
        rep, right = sum(r["reported"] for r in sel), sum(r["right"] for r in sel)
        det, det_f = sum(r["det"] for r in sel), sum(r["det_found"] for r in sel)
        big, big_f = sum(r["big"] for r in sel), sum(r["big_found"] for r in sel)
        vis, vis_f = sum(r["vis"] for r in sel), sum(r["vis_found"] for r in sel)
        within = np.mean([r["revisions"] <= r["bound"] for r in sel])
        out.append(f"{m:<22} {right / max(rep, 1):>9.3f} {det_f / max(det, 1):>11.3f} {big_f / max(big, 1):>14.3f} {vis_f / max(vis, 1):>15.3f} "
                   f"{np.mean([r['revisions'] for r in sel]):>9.1f} {within:>12.1%} "
                   f"{np.mean([r['trials'] for r in sel]):>7.1f} {np.mean([r['rounds'] for r in sel]):>6.1f}")
    for m in methods[:-2]:
        sel = [r for r in rows if r["method"] == m]
        out.append(f"{m}: missed >=3sd&2% steps: {sum(r['miss_flat'] for r in sel)} cancelled by "
                   f"a neighbouring step or flat end to end, {sum(r['miss_edge'] for r in sel)} under 2.5% (within 25% of the "
                   f"minimum effect), {sum(r['miss_other'] for r in sel)} other")
    out.append(coverage_line(rows, methods[:-2]))
    out.append(f"({len(rows) // len(methods)} histories; {sum(r['det'] for r in rows if r['method'] == methods[0])} "
               f"detectable steps, {sum(r['big'] for r in rows if r['method'] == methods[0])} of them >= 2%)")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 histories (about 20 s on 2 cores)")
    parser.add_argument("--histories", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--drift", action="store_true", help="the issue-23 drift histories (W=1 and 4)")
    parser.add_argument("--today", action="store_true", help="with --drift: today's planner too (no blocks)")
    parser.add_argument("--first", type=int, default=0, help="with --drift: the first history's index")
    parser.add_argument("--save", help="with --drift: append each history's rows to this file (JSON lines)")
    parser.add_argument("--load", help="with --drift: rows of an earlier --save run; their histories are skipped")
    parser.add_argument("--builds", action="store_true", help="compiled histories (issue 45): full vs incremental "
                        "builds vs incremental + cost-aware probes: trials, builds, simulated wall time")
    args = parser.parse_args()
    count = args.histories or (60 if args.quick else 500)
    start = time.time()
    with Pool(args.jobs) as pool:
        if args.drift:
            drift_bench(args, count, pool, start)
        elif args.builds:
            print(summarize_builds([row for batch in pool.map(run_builds, range(count)) for row in batch]))
        else:
            rows = [row for batch in pool.map(run_one, [(i, (1, 4, 8)) for i in range(count)]) for row in batch]
            print(summarize(rows))
    print(f"wall {time.time() - start:.0f} s, {args.jobs} processes")


if __name__ == "__main__":
    main()
