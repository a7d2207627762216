"""Pairs judged through a chain of side-by-side differences (issue 46). Pure.

The search measures each probe in a short block beside its open pair's nearer end, so every
probe is tied to one revision measured before it by a difference free of drift between rounds.
Two adjacent revisions that never shared a block are still tied through those differences: a
probe m judged SAME beside its reference r, next to a revision b that shared a block with r,
differs from b by (m - r) + (r - b), each term measured within one block. Judging (m, b) on
their own trials instead compares values from different rounds, and drift between rounds sent
the search down the wrong half (issue 46: 3 of 60 runs missed an 8% step under 2% round drift).
The chain's step is the sum of its links' paired steps, and its variance the sum of theirs
(distinct blocks are independent); the path chosen is the one of least variance.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

from perfbisect.service.bisect.model import Observation
from perfbisect.service.bisect.paired import PairedStep, paired_step, shared_blocks


def links(observations: Mapping[int, Observation], ok: Sequence[int], case: str,
          residual: tuple[float, int] | None) -> dict[int, dict[int, PairedStep]]:
    """Per revision, its neighbours in the block graph: every other revision it shared a block
    with on `case`, and the paired step from it to that one (both directions). Empty without a
    residual estimate."""
    graph: dict[int, dict[int, PairedStep]] = {}
    if residual is None:
        return graph
    with_blocks = [i for i in ok if observations[i].block_values(case)]
    for pos, a in enumerate(with_blocks):
        for b in with_blocks[pos + 1:]:
            if not shared_blocks(observations[a], observations[b], case):
                continue
            step = paired_step(observations[a], observations[b], case, residual)
            if step is not None:
                graph.setdefault(a, {})[b] = step
                graph.setdefault(b, {})[a] = PairedStep(-step.step, step.se, step.df, step.blocks)
    return graph


def chained_step(graph: Mapping[int, Mapping[int, PairedStep]], a: int, b: int) -> PairedStep | None:
    """The step from a to b along the path of least variance through the block graph (None when
    no path joins them). Its degrees of freedom are the residual's, its blocks those of the path."""
    if a not in graph or b not in graph:
        return None
    best: dict[int, float] = {a: 0.0}
    came: dict[int, tuple[int, PairedStep]] = {}
    heap = [(0.0, a)]
    while heap:
        variance, node = heapq.heappop(heap)
        if node == b:
            break
        if variance > best.get(node, math.inf):
            continue
        for nxt, step in graph[node].items():
            v = variance + step.se ** 2
            if v < best.get(nxt, math.inf):
                best[nxt], came[nxt] = v, (node, step)
                heapq.heappush(heap, (v, nxt))
    if b not in came:
        return None
    total, blocks, node, df = 0.0, [], b, 0
    while node != a:
        node, step = came[node]
        total += step.step
        blocks.extend(step.blocks)
        df = step.df
    return PairedStep(total, math.sqrt(best[b]), df, tuple(sorted(blocks)))
