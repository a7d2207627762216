"""The tracking loop's figures (issue 10): detection delay in measured heads, false alerts per
100 heads on noise-only histories (goal 0), alerts per real step (goal 1), culprits exact.

    python bench/track_replay.py [--histories N] [--seed S] [--demo]

Simulated part (pure, seconds): histories drawn from the simulator's noise model
(service/bisect/history.py), every 4th commit measured as a pushed head with 3 trials (the
head's value is their median), the service's own detection run after every head (the detector
with 3 heads per level and the branch's minimum magnitude, then grouping and matching with the
alerts raised so far, service/alerts/grouping.py), and every alert's range bisected by the real
planner on the same noise model (service/bisect/simulate.py). Unlike the service, the bisect's
measurements do not feed later detections here.
- noise-only: 400 commits (100 heads), one to three cases, per-sample cv 1-8%, drift 2% (the
  control ratio cancels it), a third of the cases bimodal (p 0.1, shift -5..-10%).
- steps: 200 commits (50 heads), one to three steps of 6% to 30% on random cases, same noise.
With --demo, also `perfbisect demo --track --json` on this machine (a real replay: minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.alerts.grouping import CaseHistory, KnownAlert, detect_steps, group_steps, overlap, reconcile  # noqa: E402
from perfbisect.service.alerts.service import MIN_HEADS  # noqa: E402
from perfbisect.service.bisect.changepoints import compute_change_points  # noqa: E402
from perfbisect.service.bisect.history import CaseModel, History  # noqa: E402
from perfbisect.service.bisect.model import BisectConfig  # noqa: E402
from perfbisect.service.bisect.simulate import run  # noqa: E402

EVERY, TRIALS, MIN_MAGNITUDE = 4, 3, 0.05
RELATIVE = True  # the service's detector: on the logs of the heads' values (--linear: on the values)


def random_cases(rng: np.random.Generator, commits: int, n_steps: int) -> tuple[dict[str, CaseModel], list[int]]:
    names = [f"case{j}" for j in range(int(rng.integers(1, 4)))]
    levels: dict[str, list[tuple[int, float]]] = {n: [(0, 100.0)] for n in names}
    steps = sorted(rng.choice(np.arange(8, commits - 4 * EVERY * MIN_HEADS), size=n_steps, replace=False).tolist()) \
        if n_steps else []
    for step in steps:
        for name in rng.choice(names, size=int(rng.integers(1, len(names) + 1)), replace=False):
            size = math.exp(rng.uniform(math.log(0.06), math.log(0.30))) * rng.choice([-1, 1])
            levels[name].append((step, levels[name][-1][1] * (1 + size)))
    cases = {}
    for name in names:
        bimodal = rng.random() < 1 / 3
        cases[name] = CaseModel(cv=math.exp(rng.uniform(math.log(0.01), math.log(0.08))), levels=tuple(levels[name]),
                                bimodal_p=0.1 if bimodal else 0.0,
                                bimodal_shift=-rng.uniform(0.05, 0.10) if bimodal else 0.0)
    return cases, steps


def make_history(rng: np.random.Generator, commits: int, n_steps: int) -> tuple[History, list[int]]:
    cases, steps = random_cases(rng, commits, n_steps)
    return History(n_revisions=commits + 1, cases=cases, samples_per_trial=20, process_drift_cv=0.02,
                   control_value=100.0, control_cv=0.01), steps


def replay(history: History, rng: np.random.Generator) -> dict[int, dict]:
    """Measure every EVERY-th commit as it is pushed and detect after each; returns the alerts
    {id: {span, first_seen}} as the service would hold them."""
    detector = partial(compute_change_points, min_magnitude=MIN_MAGNITUDE, min_size=MIN_HEADS, relative=RELATIVE)
    points: dict[str, list[tuple[int, float]]] = {name: [] for name in history.cases}
    alerts: dict[int, dict] = {}
    for head in range(0, history.n_revisions, EVERY):
        trials = [history.draw_trial(head, rng) for _ in range(TRIALS)]
        for name in history.cases:
            points[name].append((head, float(np.median([t[name][0] for t in trials]))))
        cases = [CaseHistory(name, tuple(p for p, _ in pts), tuple(v for _, v in pts)) for name, pts in points.items()]
        groups = group_steps(detect_steps(cases, detector))
        known = [KnownAlert(i, "new", "regression", a["span"]) for i, a in alerts.items()]
        for match in reconcile(groups, known):
            span = (match.group.before, match.group.after)
            if match.alert_id is None:
                alerts[len(alerts) + 1] = {"span": span, "first_seen": head}
            else:
                alerts[match.alert_id]["span"] = overlap(alerts[match.alert_id]["span"], span) or span
    return alerts


def sub_history(history: History, lo: int, hi: int) -> History:
    """Revisions lo..hi of `history` as a history of their own (what an alert's bisect sees)."""
    cases = {name: replace(c, levels=((0, c.level_at(lo)), *((s - lo, v) for s, v in c.levels if lo < s <= hi)))
             for name, c in history.cases.items()}
    return replace(history, n_revisions=hi - lo + 1, cases=cases)


def bisect_exact(history: History, span: tuple[int, int], step: int, seed: int) -> bool:
    plan, _, _ = run(sub_history(history, *span), BisectConfig(min_effect=MIN_MAGNITUDE, workers=2), seed=seed)
    return any(c.first == c.last == step - span[0] for c in plan.culprits)


def describe(history: History, steps: list[int], step: int) -> dict:
    """Why a step may be missed: its largest size, the noise of one trial of that case, and the
    commits to the nearest other step."""
    sizes = {name: c.level_at(step) / c.level_at(step - 1) - 1 for name, c in history.cases.items()}
    name = max(sizes, key=lambda n: abs(sizes[n]))
    gap = min((abs(step - s) for s in steps if s != step), default=None)
    return {"size": round(sizes[name], 3), "trial_noise": round(history.trial_noise(name), 4),
            "bimodal": history.cases[name].bimodal_p > 0, "commits_to_next_step": gap}


def simulated(histories: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    false_noise, heads_noise = 0, 0
    for _ in range(histories):
        history, _ = make_history(rng, 400, 0)
        false_noise += len(replay(history, rng))
        heads_noise += len(range(0, history.n_revisions, EVERY))
    per_step, delays, exact, false_steps, n_steps, missed = [], [], 0, 0, 0, []
    for i in range(histories):
        history, steps = make_history(rng, 200, int(rng.integers(1, 4)))
        alerts = replay(history, rng)
        n_steps += len(steps)
        for step in steps:
            covering = [a for a in alerts.values() if a["span"][0] < step <= a["span"][1]]
            per_step.append(len(covering))
            if not covering:
                missed.append(describe(history, steps, step))
            if covering:
                first = min(a["first_seen"] for a in covering)
                delays.append(sum(step <= h <= first for h in range(0, history.n_revisions, EVERY)))
                exact += bisect_exact(history, covering[0]["span"], step, seed + i)
        false_steps += sum(not any(a["span"][0] < s <= a["span"][1] for s in steps) for a in alerts.values())
    return {
        "noise_only": {"histories": histories, "heads": heads_noise, "false_alerts": false_noise,
                       "false_alerts_per_100_heads": round(100 * false_noise / heads_noise, 3)},
        "steps": {"histories": histories, "steps": n_steps, "alerted": sum(c >= 1 for c in per_step),
                  "alerts_per_step": round(float(np.mean(per_step)), 3),
                  "steps_with_one_alert": sum(c == 1 for c in per_step),
                  "delay_heads_median": float(np.median(delays)) if delays else None,
                  "delay_heads_max": max(delays) if delays else None,
                  "culprits_exact": exact, "false_alerts": false_steps, "missed": missed},
    }


def demo_replay() -> dict:
    with tempfile.TemporaryDirectory(prefix="perfbisect-track-bench-") as home:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        done = subprocess.run([str(Path(sys.executable).parent / "perfbisect"), "demo", "--track", "--json",
                               "--path", f"{home}/minikern"], env={**env, "PERFBISECT_HOME": home},
                              capture_output=True, text=True)
        if not done.stdout.strip():
            raise SystemExit(done.stderr[-3000:])
        return json.loads(done.stdout)["score"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--histories", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--demo", action="store_true", help="also replay the demo repository (minutes)")
    parser.add_argument("--linear", action="store_true",
                        help="detect on the values, not their logs (the detector before the twelfth session)")
    args = parser.parse_args()
    global RELATIVE
    RELATIVE = not args.linear
    figures = {"simulated": simulated(args.histories, args.seed)}
    if args.demo:
        figures["demo"] = demo_replay()
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
