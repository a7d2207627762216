"""Drive the real planner against trials drawn from a history's noise model.

`perfbisect simulate HISTORY.json [--workers W] [--seed N] [--json]` is `load_history` +
`simulate` + `format_simulation` (or `json.dumps` of the result). Pure apart from reading the
history file; deterministic for a given seed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np

from perfbisect.service.bisect.buildcost import expected_costs
from perfbisect.service.bisect.history import History, HistoryError, load_history
from perfbisect.service.bisect.model import BisectConfig, Observation, Plan, RevisionState
from perfbisect.service.bisect.shapes import shape_json
from perfbisect.service.bisect.planner import plan_next

__all__ = ["History", "HistoryError", "format_simulation", "load_history", "run", "simulate"]

MAX_ROUNDS = 10_000


def _short(x: float) -> float:
    return float(f"{x:.6g}")


class _Bench:
    """The simulated trials so far: states, decision values and their blocks per revision. The
    history's drift (target only) is one factor per round, one per block (an unpaired trial is its
    own block), one per trial, a per-worker offset and a trend in the trials run so far; unpaired
    trials go round-robin over the workers, each block to one. A case with a regime flips its
    state before each trial (the machine's, shared by all workers)."""

    def __init__(self, history: History, seed: int, workers: int = 1) -> None:
        self.history = history
        self.rng = np.random.default_rng(seed)
        self.values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.blocks: dict[int, dict[str, list[int | None]]] = defaultdict(lambda: defaultdict(list))
        self.rounds: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.samples: dict[int, dict[str, list[tuple[float, ...]]]] = defaultdict(lambda: defaultdict(list))
        self.control: dict[int, dict[str, list[tuple[float, ...]]]] = defaultdict(lambda: defaultdict(list))
        self.round = 0  # rounds run so far (the current round's number)
        self.states: dict[int, RevisionState] = {}
        self.trials = 0
        self.workers = workers
        self.offsets = history.drift.worker_offsets(workers, np.random.default_rng([seed, 1]))
        self._drift_rng = np.random.default_rng([seed, 2])  # drift draws never shift the trial noise
        self._round = 1.0
        self._unit = 1.0  # the current block's factor (an unpaired trial's own)
        self._blocks = 0
        self._slow: set[str] = set()
        self.builds: Any = None  # run()'s _Builds

    def run_round(self, plan: Plan) -> None:
        self._round = self.history.drift.round_factor(self._drift_rng)
        self.round += 1
        for k, revision in enumerate(plan.dispatch_order()):
            self._unit = self.history.drift.block_factor(self._drift_rng)
            self.run_trial(revision, k % self.workers, None)
        for k, block in enumerate(plan.blocks):
            self._blocks += 1
            self._unit = self.history.drift.block_factor(self._drift_rng)
            for revision in block.order():
                self.run_trial(revision, k % self.workers, self._blocks)

    def _target_drift(self, worker: int) -> float:
        trend = math.exp(self.history.drift.trend * self.trials / self.workers)
        return self._round * self._unit * self.history.drift.trial_factor(self._drift_rng) * self.offsets[worker] * trend

    def run_trial(self, revision: int, worker: int = 0, block: int | None = None) -> None:
        drift = self._target_drift(worker)
        for name, case in self.history.cases.items():
            if case.regime_p and self._drift_rng.random() < case.regime_p:
                self._slow ^= {name}
        self.trials += 1
        if revision in self.history.unbuildable:
            self.states[revision] = RevisionState.unbuildable
            return
        if self.history.is_wrong(revision):
            self.states[revision] = RevisionState.wrong_results
            return
        self.states[revision] = RevisionState.ok
        calls: dict[str, tuple] = {}
        for case, (value, _target) in self.history.draw_trial(revision, self.rng, drift, self._slow, calls).items():
            self.values[revision][case].append(value)
            self.samples[revision][case].append(tuple(calls[case][0]))
            self.control[revision][case].append(tuple(calls[case][1]))
            self.blocks[revision][case].append(block)
            self.rounds[revision][case].append(self.round)

    def observations(self) -> dict[int, Observation]:
        return {i: Observation(state, {c: tuple(v) for c, v in self.values[i].items()},
                               blocks={c: tuple(v) for c, v in self.blocks[i].items()},
                               rounds={c: tuple(v) for c, v in self.rounds[i].items()},
                               samples={c: tuple(v) for c, v in self.samples[i].items()},
                               control_samples={c: tuple(v) for c, v in self.control[i].items()})
                for i, state in self.states.items()}


class _Builds:
    """The builds a simulated bisect pays for (`History.build`): a revision is built once, at a
    full build's cost, or with `incremental` trees and compiler cache at its `buildcost`
    rebuild cost from the revisions built before its round."""

    def __init__(self, history: History, incremental: bool) -> None:
        self.model = history.build
        self.incremental = incremental
        self.built: set[int] = set()
        self.seconds = 0.0

    def costs(self) -> tuple[float, ...]:
        """What the planner is told each revision costs now."""
        if self.model is None:
            return ()
        if not self.incremental:
            return tuple(0.0 if r in self.built else self.model.full_s for r in range(len(self.model.touch_s)))
        return expected_costs(self.model.touch_s, self.model.full_s, self.built)

    def pay(self, plan: Plan) -> None:
        if self.model is None:
            return
        new = {r.revision for r in plan.requests} | {r for b in plan.blocks for r in b.order()}
        new -= self.built
        costs = self.costs()
        self.seconds += sum(costs[r] for r in new)
        self.built |= new


def run(history: History, config: BisectConfig, seed: int = 0, *, cost_aware: bool = False,
        incremental: bool = True) -> tuple[Plan, _Bench, int]:
    """Plan, run every requested trial, repeat until done. Returns the final plan, the trials
    and the number of rounds (the bench's `builds` what the builds cost). With `cost_aware` the
    planner is told each revision's expected build cost every round. Raises RuntimeError if the
    planner never finishes."""
    bench = _Bench(history, seed, max(1, config.workers))
    bench.builds = builds = _Builds(history, incremental)
    for rounds in range(MAX_ROUNDS):
        if cost_aware:
            config = replace(config, build_costs=builds.costs())
        plan = plan_next(history.n_revisions, bench.observations(), config)
        if plan.done:
            return plan, bench, rounds
        builds.pay(plan)
        bench.run_round(plan)
    raise RuntimeError(f"planner did not finish in {MAX_ROUNDS} rounds")


def simulate(history: History, workers: int = 1, seed: int = 0,
             config: BisectConfig | None = None, *, cost_aware: bool = False,
             incremental: bool = True) -> dict[str, Any]:
    """Run one simulated bisect and return the `--json` result of issue 4: culprits (revision,
    range, per-case rel/ci/before/after, sha when the history names a repository), correctness
    findings, revisions measured, trials, rounds. `revision` is None for a range culprit.
    `rel`/`ci` are on the decision value (control ratio); `before`/`after` are the median ratios
    times the control's nominal value, i.e. the target metric with the drift cancelled (a raw
    target median would carry the process drift). A history with a build model (`build`) adds
    builds, build seconds and the simulated wall time (builds and trials spread over the
    workers), with builds incremental or full and probes cost-aware or not. Raises RuntimeError
    if the planner never finishes."""
    config = replace(config or BisectConfig(), workers=workers, higher_is_better=history.higher_is_better)
    plan, bench, rounds = run(history, config, seed, cost_aware=cost_aware, incremental=incremental)
    shas = history.shas
    culprits = []
    scale = history.control_value
    for c in plan.culprits:
        cases = {}
        for name, effect in c.effects.items():
            cases[name] = {"rel": round(effect.rel, 4), "ci": [round(effect.ci[0], 4), round(effect.ci[1], 4)],
                           "before": _short(effect.before * scale), "after": _short(effect.after * scale)}
        exact = c.first == c.last
        entry: dict[str, Any] = {"revision": c.first if exact else None}
        if shas is not None:
            entry["sha"] = shas[c.first] if exact else None
        entry.update({"range": [c.first, c.last], "cases": cases})
        culprits.append(entry)
    return {
        "culprits": culprits,
        "shapes": [shape_json(f) for f in plan.shapes],
        "correctness": [{"first_bad": f.first_bad, "fixed_at": f.fixed_at} for f in plan.correctness],
        "revisions_measured": len(bench.states),
        "trials": bench.trials,
        "rounds": rounds,
        **_build_figures(history, bench, workers),
    }


def _build_figures(history: History, bench: _Bench, workers: int) -> dict[str, Any]:
    """builds, build_s and wall_s of a history with a build model; nothing otherwise."""
    if history.build is None:
        return {}
    build_s = bench.builds.seconds
    wall = (build_s + bench.trials * history.build.trial_s) / max(1, workers)
    return {"builds": len(bench.builds.built), "build_s": round(build_s, 1), "wall_s": round(wall, 1)}


def format_simulation(result: dict[str, Any]) -> str:
    """A plain-text table of a `simulate` result, one row per culprit and case."""
    lines = []
    if result["culprits"]:
        lines.append(f"{'culprit':<22} {'case':<24} {'before':>12} {'after':>12} {'step':>8}  95% CI")
    for c in result["culprits"]:
        first, last = c["range"]
        label = str(first) if first == last else f"{first}..{last} (range)"
        if c.get("sha"):
            label = f"{first} {c['sha'][:10]}"
        for name, e in c["cases"].items():
            lines.append(f"{label:<22} {name:<24} {e['before']:>12.6g} {e['after']:>12.6g} "
                         f"{e['rel']:>+8.2%}  [{e['ci'][0]:+.2%}, {e['ci'][1]:+.2%}]")
            label = ""
    if not result["culprits"]:
        lines.append("no performance culprit")
    for f in result.get("shapes", ()):
        first, last = f["range"]
        lines.append(f"{f['kind']} from {first if first == last else f'{first}..{last}'} on {f['case']}: spread "
                     f"{f['before']:.1%} -> {f['after']:.1%} (x{f['ratio']:.2f} [{f['ratio_ci'][0]:.2f}, {f['ratio_ci'][1]:.2f}])")
    for f in result["correctness"]:
        fixed = "not fixed in range" if f["fixed_at"] is None else f"fixed at {f['fixed_at']}"
        lines.append(f"wrong results from revision {f['first_bad']}, {fixed}")
    lines.append(f"revisions measured {result['revisions_measured']}, trials {result['trials']}, "
                 f"rounds {result['rounds']}")
    if "wall_s" in result:
        lines.append(f"builds {result['builds']}, build {result['build_s']:.0f} s, "
                     f"simulated wall time {result['wall_s']:.0f} s")
    return "\n".join(lines)
