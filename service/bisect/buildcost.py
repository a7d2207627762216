"""What building a revision is expected to cost, for the planner's cost-aware probes (issue 45).
Pure.

A commit's *touch cost* is the compile seconds its own changes cause (0 for one that touches only
Python or tests, a translation unit's compile time for one that touches it, a full build for an
LLVM bump). With an incremental build tree and a compiler cache, building revision r once
revision b was built recompiles what the commits between them touched, so r costs the touch
costs of the commits between r and the nearest revision built (at most a full build), and 0 once
r itself was built. Before anything is built every revision costs a full build.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import accumulate


def rebuild_cost(a: int, b: int, touch: Sequence[float], full: float) -> float:
    """Seconds to build revision b in a tree (and cache) that last built revision a."""
    lo, hi = sorted((a, b))
    return min(full, float(sum(touch[lo + 1:hi + 1])))


def expected_costs(touch: Sequence[float], full: float, built: Collection[int]) -> tuple[float, ...]:
    """Each revision's expected build seconds given the revisions `built` so far: 0 for one built,
    else the touch costs between it and the nearest built revision on either side (a full build at
    most, and where nothing is built)."""
    n = len(touch)
    prefix = [0.0, *accumulate(float(t) for t in touch)]  # prefix[i + 1] = touch[0..i]
    done = sorted(b for b in set(built) if 0 <= b < n)
    costs = []
    below = None
    k = 0
    for r in range(n):
        while k < len(done) and done[k] <= r:
            below = done[k]
            k += 1
        above = done[k] if k < len(done) else None
        options = [full]
        if below is not None:
            options.append(prefix[r + 1] - prefix[below + 1])
        if above is not None:
            options.append(prefix[above + 1] - prefix[r + 1])
        costs.append(min(options))
    return tuple(costs)


def touch_costs(changed: Sequence[Collection[str]], unit_seconds: float, full: float,
                compiled: Sequence[str] = (".c", ".cc", ".cpp", ".cxx", ".cu", ".hip", ".h", ".hpp", ".cuh",
                                           "CMakeLists.txt", "setup.py", ".cmake")) -> tuple[float, ...]:
    """Touch costs from each commit's changed paths: `unit_seconds` per changed compiled source
    (a header or a build file: a full build), 0 for a commit that touches none."""
    costs = []
    for paths in changed:
        units = [p for p in paths if p.endswith(compiled)]
        if any(p.endswith((".h", ".hpp", ".cuh", "CMakeLists.txt", "setup.py", ".cmake")) for p in units):
            costs.append(full)
        else:
            costs.append(min(full, unit_seconds * len(units)))
    return tuple(costs)
