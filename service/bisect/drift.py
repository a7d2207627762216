"""Is there drift between blocks that the control does not cancel? (issue 46) Pure.

The side-by-side search pays a reference trial for every probe. That buys nothing on a machine
whose rounds do not drift, so the search measures its first probes beside their references and
looks: a revision's trials inside a block against its trials elsewhere (other blocks, other
rounds) should differ by trial noise alone. When they differ by more (a chi-square test on the
standardised differences), the drift is real and every probe goes on being measured side by side;
otherwise probes are single trials again, judged across rounds as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from perfbisect.service.bisect.model import Observation

# Blocks looked at before the search may go back to unpaired probes, and the level at which the
# differences between a block's trials and the rest say "drift".
MIN_BLOCKS = 2
DRIFT_ALPHA = 0.05


def block_deviations(observation: Observation, case: str) -> list[tuple[float, float]]:
    """Per block that measured this revision on `case`: the mean log value in the block minus the
    mean of the revision's values outside it, and that difference's variance factor
    (1/n_in + 1/n_out). Blocks of a revision measured nowhere else give nothing."""
    values = np.log(np.asarray(observation.values.get(case, ()), dtype=float))
    blocks = observation.blocks.get(case, ())
    if len(blocks) != len(values):
        return []
    out = []
    for block in {b for b in blocks if b is not None}:
        inside = np.array([b == block for b in blocks])
        if 0 < inside.sum() < len(values):
            out.append((float(values[inside].mean() - values[~inside].mean()),
                        1.0 / inside.sum() + 1.0 / (~inside).sum()))
    return out


def drift_evident(observations: Mapping[int, Observation], ok: Sequence[int],
                  noise: Mapping[str, tuple[float, int] | None]) -> bool:
    """True while the blocks measured so far do not rule drift out: fewer than MIN_BLOCKS
    block deviations on every case, or some case whose deviations, in units of its trial noise
    within rounds (`noise`), are too large for noise alone (chi-square, DRIFT_ALPHA)."""
    seen = 0
    for case, estimate in noise.items():
        deviations = [d for i in ok for d in block_deviations(observations[i], case)]
        seen = max(seen, len(deviations))
        if estimate is None or estimate[0] <= 0 or not deviations:
            continue
        q = sum(diff ** 2 / (estimate[0] ** 2 * factor) for diff, factor in deviations)
        if len(deviations) >= MIN_BLOCKS and stats.chi2.sf(q, len(deviations)) < DRIFT_ALPHA:
            return True
    return seen < MIN_BLOCKS
