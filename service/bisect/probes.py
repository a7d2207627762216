"""Which revisions to build next: the ends, neighbours of unbuildable ends, evenly spaced
points inside open pairs, and the boundaries of wrong-results runs. Pure index arithmetic."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from perfbisect.service.bisect.model import CorrectnessFinding, Observation, RevisionState


def unmeasured_between(lo: int, hi: int, measured: Mapping[int, Observation]) -> list[int]:
    """Revisions strictly between lo and hi not tried yet."""
    return [r for r in range(lo + 1, hi) if r not in measured]


# Revisions tried inward from each end while nothing in the range has built: a build failing at
# both ends and at their two nearest neighbours is most likely broken everywhere (a wrong build
# command, a missing toolchain), and walking on would build every revision of the range to say so.
EDGE_WALK = 2


def nothing_built(measured: Mapping[int, Observation]) -> bool:
    """True when revisions were tried and every one of them failed to build."""
    return bool(measured) and all(o.state == RevisionState.unbuildable for o in measured.values())


def edge_probes(n: int, measured: Mapping[int, Observation]) -> list[int]:
    """Where an end failed to build, the nearest untried revision inward (asv and git-bisect
    skip failed builds the same way). Walking stops at the first revision that built, whether it
    passed the accuracy check or not: a wrong-results run is bounded by `correctness` instead;
    and, while nothing has built anywhere, after EDGE_WALK revisions beyond each end."""
    walk = EDGE_WALK if nothing_built(measured) else n
    probes = []
    for start, step in ((0, 1), (n - 1, -1)):
        r = start
        while 0 <= r < n and r in measured and measured[r].state == RevisionState.unbuildable:
            r += step
        if 0 <= r < n and r not in measured and abs(r - start) <= walk:
            probes.append(r)
    return sorted(set(probes))


def scan_points(n: int, k: int) -> list[int]:
    """`k` evenly spaced interior revisions of 0..n-1 (fewer when the range has fewer)."""
    interior = n - 2
    if k <= 0 or interior <= 0:
        return []
    k = min(k, interior)
    return sorted({round(i * (n - 1) / (k + 1)) for i in range(1, k + 1)})


def nearest_candidate(target: float, candidates: Sequence[int], taken: set[int]) -> int | None:
    """The untaken candidate closest to `target` (the lower one on a tie)."""
    free = [c for c in candidates if c not in taken]
    if not free:
        return None
    return min(free, key=lambda c: (abs(c - target), c))


# How unevenly a cost-aware probe may split an open pair: its larger side at most this share of the
# pair's candidates (at least one revision) beyond the midpoint's larger side.
NEAR_SHARE = 0.1


def worst_probes(m: int) -> int:
    """Probes a binary search needs, at worst, to place a step among `m` untried revisions."""
    return math.ceil(math.log2(m + 1))


def near_midpoint(candidates: Sequence[int]) -> list[int]:
    """The candidates of one open pair that split it almost as evenly as its midpoint does: the
    larger side at most NEAR_SHARE of the candidates (one at least) beyond the midpoint's, and
    never so large that the search could need one probe more than from the midpoint (its larger
    side + 1 within 2^(worst_probes(m) - 1)): the revision bound holds at worst, not only on average."""
    m = len(candidates)
    if m == 0:
        return []
    ideal = (m - 1) - (m - 1) // 2  # the midpoint's larger side
    limit = min(ideal + max(1, int(NEAR_SHARE * m)), 2 ** (worst_probes(m) - 1) - 1)
    return [c for i, c in enumerate(candidates) if max(i, m - 1 - i) <= max(limit, ideal)]


def cheapest(target: float, candidates: Sequence[int], taken: set[int], costs: Sequence[float],
             window: Sequence[int]) -> int | None:
    """Of the untaken candidates in `window`, the one cheapest to build (then the nearest to
    `target`, then the lower); without costs (or an empty window) the nearest candidate."""
    free = [c for c in window if c not in taken]
    if not costs or not free:
        return nearest_candidate(target, candidates, taken)
    return min(free, key=lambda c: (costs[c] if c < len(costs) else math.inf, abs(c - target), c))


def _window(candidates: Sequence[int], target: float, count: int) -> list[int]:
    """Where a point of `count` in a pair may go: near the midpoint for one point; for several,
    within NEAR_SHARE of the spacing of the ideal position."""
    if count == 1:
        return near_midpoint(candidates)
    reach = NEAR_SHARE * len(candidates) / (count + 1)
    return [c for c in candidates if abs(c - target) <= reach]


def allocate(open_pairs: Sequence[tuple[int, int]], workers: int,
             measured: Mapping[int, Observation], costs: Sequence[float] = ()) -> list[int]:
    """Revisions to build this round inside the open pairs: one per pair at least, `workers` in
    all when there are fewer pairs, extra points going to the pair with the most candidates per
    point. Inside a pair the points are evenly spaced (nearest untried revision to each ideal
    position), so a pair of N candidates shrinks by a factor j+1 per round with j points. With
    `costs` (expected build seconds per revision), each point is the cheapest revision of those
    that split the pair almost as evenly (`near_midpoint`, `_window`)."""
    candidates = {pair: unmeasured_between(*pair, measured) for pair in open_pairs}
    share = {pair: 1 for pair in open_pairs if candidates[pair]}
    spare = max(0, workers - len(share))
    while spare and share:
        pair = max(share, key=lambda p: (len(candidates[p]) / (share[p] + 1), -p[0]))
        if share[pair] >= len(candidates[pair]):
            break
        share[pair] += 1
        spare -= 1
    chosen: list[int] = []
    for (lo, hi), count in share.items():
        taken: set[int] = set()
        for t in range(1, count + 1):
            target = lo + (hi - lo) * t / (count + 1)
            pick = cheapest(target, candidates[(lo, hi)], taken, costs, _window(candidates[(lo, hi)], target, count))
            if pick is not None:
                taken.add(pick)
        chosen.extend(sorted(taken))
    return sorted(set(chosen))


def nearer_end(pair: tuple[int, int], revision: int) -> int:
    """The end of `pair` nearer to `revision` (the lower one on a tie): the reference a probe
    inside the pair is measured beside (issue 46)."""
    lo, hi = pair
    return lo if revision - lo <= hi - revision else hi


def probe_references(open_pairs: Sequence[tuple[int, int]], probes: Sequence[int]) -> list[tuple[int, int]]:
    """(reference, probe) for each probe: the nearer end of the open pair that holds it."""
    out = []
    for revision in probes:
        pair = next(p for p in open_pairs if p[0] < revision < p[1])
        out.append((nearer_end(pair, revision), revision))
    return out


def _wrong_runs(measured: Mapping[int, Observation]) -> list[tuple[int, int]]:
    """Maximal runs of wrong-results revisions among the measured ones, unbroken by an ok one
    (unbuildable revisions in between say nothing and do not break a run)."""
    runs: list[tuple[int, int]] = []
    current: list[int] = []
    for r in sorted(measured):
        if measured[r].is_wrong:
            current.append(r)
        elif measured[r].state == RevisionState.ok and current:
            runs.append((current[0], current[-1]))
            current = []
    if current:
        runs.append((current[0], current[-1]))
    return runs


def correctness(n: int, measured: Mapping[int, Observation]) -> tuple[list[CorrectnessFinding], list[int]]:
    """Correctness findings so far, and the revisions to build to pin their boundaries (a
    binary search between the last passing revision and the first failing one, and between the
    last failing and the next passing one)."""
    findings, probes = [], []
    ok = sorted(r for r, o in measured.items() if o.state == RevisionState.ok)
    for first, last in _wrong_runs(measured):
        before = max((r for r in ok if r < first), default=-1)
        after = min((r for r in ok if r > last), default=n)
        for lo, hi in ((before, first), (last, after)):
            between = unmeasured_between(lo, hi, measured)
            if between:
                probes.append(between[len(between) // 2])
        cases = tuple(sorted(set().union(*(measured[r].wrong for r in measured if first <= r <= last))))
        findings.append(CorrectnessFinding(first_bad=first, fixed_at=None if after == n else after, cases=cases))
    return findings, sorted(set(probes))
