"""How much work a search still expects: for a progress bar that counts planned trials and can
show an ETA, and the builds it still expects (issue 45: a build of a compiled library can take
longer than all its trials). Pure; an estimate that is recomputed every round, and exact once the
job is done."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from perfbisect.service.bisect.model import BisectConfig, Observation, Plan
from perfbisect.service.bisect.probes import unmeasured_between


def expected_trials(finished: int, observations: Mapping[int, Observation], plan: Plan,
                    config: BisectConfig, n: int | None = None) -> int:
    """Trials finished, plus this round's, plus those the open pairs are still expected to need:
    a binary search of each pair's untried revisions (`initial_trials` per probe, minus this
    round's probes in it) and the confirmation trials of the culprit it should end on. Before an
    end of the range 0..n-1 has been measured no pair is open yet: the whole range then counts as
    one (a search is run for at least one step), so the first round does not read as all the work."""
    if plan.done:
        return finished
    planned = sum(r.trials for r in plan.requests)
    future = sum(probes * config.initial_trials + 2 * max(0, config.confirm_trials - config.initial_trials)
                 for _, probes in _future_probes(observations, plan, n))
    return finished + planned + future


def _future_probes(observations: Mapping[int, Observation], plan: Plan,
                   n: int | None) -> list[tuple[list[int], int]]:
    """Per open pair (the whole range before its ends are measured): its untried revisions and
    the probes a binary search of them still needs beyond this round's."""
    probing = {r.revision for r in plan.requests}
    pairs = list(plan.open_pairs)
    if n is not None and n > 2 and not pairs and (0 not in observations or n - 1 not in observations):
        pairs = [(0, n - 1)]
    out = []
    for a, b in pairs:
        untried = unmeasured_between(a, b, observations)
        probes_now = sum(1 for r in untried if r in probing)
        out.append((untried, max(0, math.ceil(math.log2(len(untried) + 1)) - probes_now)))
    return out


def expected_build_s(observations: Mapping[int, Observation], plan: Plan, costs: Sequence[float],
                     fallback: float, n: int | None = None) -> tuple[float, list[tuple[int, float]]]:
    """The build seconds a search still expects, and this round's builds (revision, expected
    seconds) in dispatch order: each revision of this round not measured yet at its cost, then
    every future probe at the mean cost of its pair's untried revisions. Without `costs` (or past
    their end) a build costs `fallback` (the job's mean build so far)."""
    if plan.done:
        return 0.0, []

    def cost(r: int) -> float:
        return float(costs[r]) if r < len(costs) else fallback

    now = [(r, cost(r)) for r in dict.fromkeys(plan.dispatch_order()) if r not in observations]
    later = sum(probes * (sum(cost(r) for r in untried) / len(untried) if untried else fallback)
                for untried, probes in _future_probes(observations, plan, n))
    return sum(c for _, c in now) + later, now


def eta_seconds(progress: Mapping, elapsed_s: float, done: int, expected: int) -> float:
    """Seconds left: the trials still expected at the pace of those done, their builds apart
    (a compiled library's build can outlast all its trials): the pace leaves out the seconds
    spent building (`build_s_done`), and the builds still expected (`expected_build_s`) are added
    at their expected cost. The CLI's line and bar and the API's `progress.eta_s` all use it."""
    built = float(progress.get("build_s_done") or 0.0)
    builds_left = float(progress.get("expected_build_s") or 0.0)
    if done <= 0:
        return builds_left
    pace = max(0.0, elapsed_s - built) / done if built < elapsed_s else elapsed_s / done
    return pace * max(0, expected - done) + builds_left
