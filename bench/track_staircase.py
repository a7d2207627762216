"""A staircase history fed through the tracking detector, with and without load: false and
missed alerts when a suspected step is alerted at once, and when it is first re-measured side by
side with the head before it (service/alerts/service.py, `confirm_trials`).

    python bench/track_staircase.py [--histories 200] [--seed 0]

Pure and simulated (seconds). The heads are the tracking demo's (backfill 1, 3, 5, then every
4th commit to 53) and so are the steps: a gemm-like case with a -55% step at commit 10, -40% at
28 and a +180% partial recovery at 43; an attention-like case with -60% at 22; a flat case.
A head's value is the median of 3 trials. A trial's ratio is level * exp(load + noise): `noise`
is the trial's own (sd 3% quiet, 5% half loaded, 10% loaded) and `load` the machine's state at the
time it runs: a loaded machine is busy in episodes of a few heads, and while busy the cache-bound
cases (gemm, flat) run 15% (half loaded) or 30% (loaded) slower against their control; every trial
run at that time shares it. A re-measure runs `confirm_trials` trials of the suspected step's last
head before and first head after it,
alternating, at the time of the detection: they share its load, so their difference is the
step's and not the load's.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.alerts import grouping  # noqa: E402
from perfbisect.service.alerts.grouping import CaseHistory, KnownAlert, Remeasure  # noqa: E402
from perfbisect.service.alerts.service import ALERT_PVALUE, MIN_HEADS, SUSPECT_PVALUE, SUSPECT_TREND_PVALUE  # noqa: E402
from perfbisect.service.bisect.changepoints import compute_change_points  # noqa: E402

HEADS = [1, 3, 5] + list(range(9, 54, 4))
STEPS = {"gemm": [(0, 1.0), (10, 0.45), (28, 0.27), (43, 0.75)], "attention": [(0, 1.0), (22, 0.4)], "flat": [(0, 1.0)]}
TRIALS, MIN_MAGNITUDE = 3, 0.15
RELATIVE = True  # the service's detector: on the logs of the heads' values (--linear: on the values)
SUSPECT_TREND = SUSPECT_TREND_PVALUE  # a suspect's jump test (--suspect-trend P: the service's before was 0.01)
# (trial noise sd, slowdown of the cache-bound cases while the machine is busy)
MACHINES = {"quiet": (0.03, 0.0), "half loaded": (0.05, 0.15), "loaded": (0.10, 0.3)}


def level(case: str, commit: int) -> float:
    return [v for at, v in STEPS[case] if at <= commit][-1]


@dataclass
class Machine:
    rng: np.random.Generator
    sd: float
    slowdown: float
    busy: bool = False

    def tick(self) -> None:
        """Time passes (one head's run). A loaded machine is busy in episodes (a neighbour's test
        run: it stays busy with p 0.7, becomes busy with p 0.3), and while busy the cache-bound
        cases run `slowdown` slower than their control (in log terms)."""
        if self.slowdown:
            self.busy = self.rng.random() < (0.7 if self.busy else 0.3)

    def trial(self, case: str, commit: int) -> float:
        bias = -self.slowdown if self.busy and case != "attention" else 0.0
        return level(case, commit) * float(np.exp(bias + self.sd * self.rng.standard_normal()))


@dataclass
class Branch:
    trials: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    alerts: list[KnownAlert] = field(default_factory=list)
    remeasures: dict[tuple[int, int], Remeasure] = field(default_factory=dict)

    def histories(self, upto: int) -> list[CaseHistory]:
        heads = [h for h in HEADS if h <= upto]
        return [CaseHistory(case, tuple(heads), tuple(float(np.median(self.trials[case, h])) for h in heads))
                for case in STEPS]


def groups_at(branch: Branch, upto: int, pvalue: float, trend_pvalue: float) -> list[grouping.StepGroup]:
    detector = partial(compute_change_points, min_magnitude=MIN_MAGNITUDE, min_size=MIN_HEADS, pvalue=pvalue,
                       trend_pvalue=trend_pvalue, relative=RELATIVE)
    return grouping.group_steps(grouping.detect_steps(branch.histories(upto), detector))


def new_groups(branch: Branch, groups: list[grouping.StepGroup]) -> list[grouping.StepGroup]:
    return [m.group for m in grouping.reconcile(groups, branch.alerts) if m.alert_id is None]


def raise_alerts(branch: Branch, groups: list[grouping.StepGroup]) -> None:
    for group in groups:
        branch.alerts.append(KnownAlert(len(branch.alerts) + 1, "new", group.kind, (group.before, group.after)))


def remeasure(machine: Machine, branch: Branch, group: grouping.StepGroup, trials: int) -> None:
    """Both heads of the group, `trials` each, alternating, now: they share this moment's load.
    The trials join the heads' history too, as in the service."""
    machine.tick()
    values: dict[str, tuple[list[float], list[float]]] = {}
    for case in STEPS:
        values[case] = ([], [])
        for _ in range(trials):
            for side, commit in zip(values[case], (group.before, group.after)):
                side.append(machine.trial(case, commit))
                branch.trials[case, commit].append(side[-1])
    branch.remeasures[group.before, group.after] = Remeasure(group.before, group.after, values)


# alert at once at a p-value (confirm_trials 0: ALERT_PVALUE), or re-measure N trials a side first
MODES = {"at once, p 0.001 (confirm_trials 0)": (ALERT_PVALUE, 0), "at once, p 0.01": (SUSPECT_PVALUE, 0),
         "re-measure, confirm_trials 2": (SUSPECT_PVALUE, 2), "re-measure, confirm_trials 3": (SUSPECT_PVALUE, 3)}


def run(rng: np.random.Generator, machine_kind: str, mode: str) -> tuple[list[KnownAlert], int]:
    """One history; alerts at once at the mode's p-value, or suspects at SUSPECT_PVALUE
    re-measured first (the mode's trials a side) and alerted when the re-measure agrees.
    Returns the alerts and the trials the re-measures ran."""
    pvalue, confirm = MODES[mode]
    trend = SUSPECT_TREND if confirm else pvalue  # the service's: a suspect to re-measure has a looser jump test
    machine, branch = Machine(rng, *MACHINES[machine_kind]), Branch()
    for head in HEADS:
        machine.tick()
        for case in STEPS:
            branch.trials[case, head] = [machine.trial(case, head) for _ in range(TRIALS)]
        if head < 5:
            continue
        if not confirm:
            raise_alerts(branch, new_groups(branch, groups_at(branch, head, pvalue, trend)))
            continue
        for group in new_groups(branch, groups_at(branch, head, pvalue, trend)):
            if grouping.confirmation(group, branch.remeasures, MIN_MAGNITUDE) == grouping.REMEASURE:
                remeasure(machine, branch, group, confirm)  # its job finishes before the next head
        raise_alerts(branch, [g for g in new_groups(branch, groups_at(branch, head, pvalue, trend))
                              if grouping.confirmation(g, branch.remeasures, MIN_MAGNITUDE) == grouping.ALERT])
    return branch.alerts, 2 * confirm * len(branch.remeasures)


def score(alerts: list[KnownAlert]) -> tuple[int, list[int]]:
    """(false alerts: covering no step, per step 1 when no alert covers it)."""
    steps = [at for case in STEPS for at, _ in STEPS[case][1:]]
    false = sum(not any(a.span[0] < at <= a.span[1] for at in steps) for a in alerts)
    return false, [int(not any(a.span[0] < at <= a.span[1] for a in alerts)) for at in steps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--linear", action="store_true",
                        help="detect on the values, not their logs (the detector before the twelfth session)")
    parser.add_argument("--suspect-trend", type=float, default=SUSPECT_TREND_PVALUE,
                        help="a suspect's jump-test p-value (the service's before the twelfth session: 0.01)")
    args = parser.parse_args()
    global RELATIVE, SUSPECT_TREND
    RELATIVE, SUSPECT_TREND = not args.linear, args.suspect_trend
    steps = [f"{case} {at}" for case in STEPS for at, _ in STEPS[case][1:]]
    print(f"{args.histories} histories of {len(HEADS)} heads, {len(steps)} steps each\n")
    print(f"| machine | alerts | false alerts | missed steps | missed per step ({', '.join(steps)}) "
          f"| re-measure trials per history (heads: {TRIALS * len(HEADS)}) |")
    print("|---|---|---|---|---|---|")
    for machine in MACHINES:
        for mode in MODES:
            rng = np.random.default_rng(args.seed)
            runs = [run(rng, machine, mode) for _ in range(args.histories)]
            scores = [score(alerts) for alerts, _ in runs]
            missed = np.sum([m for _, m in scores], axis=0)
            print(f"| {machine} | {mode} | {sum(f for f, _ in scores)} | {int(missed.sum())} of "
                  f"{len(steps) * args.histories} | {', '.join(map(str, missed))} | "
                  f"{np.mean([t for _, t in runs]):.1f} |")


if __name__ == "__main__":
    main()
