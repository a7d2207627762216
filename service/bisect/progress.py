"""How much work a search still expects: for a progress bar that counts planned trials and can
show an ETA. Pure; an estimate that is recomputed every round, and exact once the job is done."""

from __future__ import annotations

import math
from collections.abc import Mapping

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
    probing = {r.revision for r in plan.requests}
    future = 0
    pairs = list(plan.open_pairs)
    if n is not None and n > 2 and not pairs and (0 not in observations or n - 1 not in observations):
        pairs = [(0, n - 1)]
    for a, b in pairs:
        untried = unmeasured_between(a, b, observations)
        probes_now = sum(1 for r in untried if r in probing)
        probes_left = max(0, math.ceil(math.log2(len(untried) + 1)) - probes_now)
        future += probes_left * config.initial_trials + 2 * max(0, config.confirm_trials - config.initial_trials)
    return finished + planned + future
