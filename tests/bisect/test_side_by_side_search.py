"""The search measured side by side (issue 46): literal series for the pure planner, the chain
of block differences, the drift check, and the simulator's reproduction of the issue's misses."""

from __future__ import annotations

import math

import pytest

from perfbisect.service.bisect import BisectConfig, Observation, PairBlock, RevisionState, TrialRequest, Verdict, plan_next
from perfbisect.service.bisect.chain import chained_step, links
from perfbisect.service.bisect.drift import block_deviations, drift_evident
from perfbisect.service.bisect.history import load_history
from perfbisect.service.bisect.model import SIDE_BY_SIDE
from perfbisect.service.bisect.paired import block_residual
from perfbisect.service.bisect.simulate import simulate

CASE = "gemm"
SEARCH = BisectConfig(min_effect=0.05, paired_blocks=SIDE_BY_SIDE)
ACROSS_ROUNDS = BisectConfig(min_effect=0.05, paired_blocks=SIDE_BY_SIDE, search_side_by_side=False)


def obs(values, blocks=None, rounds=None) -> Observation:
    blocks = blocks if blocks is not None else [None] * len(values)
    rounds = rounds if rounds is not None else [1] * len(values)
    return Observation(RevisionState.ok, {CASE: tuple(values)}, blocks={CASE: tuple(blocks)},
                       rounds={CASE: tuple(rounds)})


# The two ends of a 9-revision range measured in round 1: the bad end 8% slower.
ENDS = {0: obs([1.000, 1.002, 0.998]), 8: obs([0.920, 0.921, 0.919])}


def test_a_probe_inside_an_open_pair_is_a_short_block_beside_the_nearer_end():
    plan = plan_next(9, ENDS, SEARCH)
    assert plan.open_pairs == ((0, 8),)
    assert plan.requests == ()
    assert plan.blocks == (PairBlock(0, 4, short=True),)  # the midpoint: a tie goes to the lower end
    assert plan.blocks[0].order() == (0, 4)

    before = plan_next(9, ENDS, ACROSS_ROUNDS)
    assert before.requests == (TrialRequest(4, 1),) and before.blocks == ()


def test_with_two_workers_each_probe_is_measured_beside_its_own_nearer_end():
    plan = plan_next(9, ENDS, BisectConfig(min_effect=0.05, paired_blocks=SIDE_BY_SIDE, workers=2))
    assert sorted(plan.blocks, key=lambda b: b.revision) == [PairBlock(0, 3, short=True), PairBlock(8, 5, short=True)]


# The step is at revision 4. Round 2 measured the probe 4 beside 0 (block 1): -8%. Round 3 measured
# the probe 2 beside 0 (block 2) while the target ran 4% slower. Judged on its own trials, 2
# (0.9605, round 3) is only 4.2% above 4 (0.920, round 2): under the 5% minimum effect, and the
# search would call the pair (2, 4) unchanged and lose the step. Through the blocks, 2 sits where
# 0 does (block 2) and 0 sits 8% above 4 (block 1): the pair (2, 4) holds the step.
DRIFTED = {
    0: obs([1.000, 1.002, 0.998, 1.000, 0.960], [None, None, None, 1, 2], [1, 1, 1, 2, 3]),
    2: obs([0.9605], [2], [3]),
    4: obs([0.920], [1], [2]),
    8: obs([0.920, 0.921, 0.919]),
}


def test_a_pair_never_measured_together_is_judged_through_the_chain_of_blocks():
    plan = plan_next(9, DRIFTED, SEARCH)
    assert plan.verdicts[(0, 2)][CASE] == Verdict.SAME  # block 2
    assert plan.verdicts[(2, 4)][CASE] == Verdict.DIFFERENT  # block 2, then block 1
    assert plan.open_pairs == ((2, 4),)
    assert plan.blocks == (PairBlock(2, 3, short=True),)

    before = plan_next(9, DRIFTED, ACROSS_ROUNDS)
    assert before.verdicts[(2, 4)][CASE] != Verdict.DIFFERENT  # across rounds the drift hid it
    assert (2, 4) not in before.open_pairs


def test_the_chain_adds_the_block_steps_and_their_variances():
    residual = (0.01, 4)
    graph = links(DRIFTED, [0, 2, 4, 8], CASE, residual)
    assert set(graph) == {0, 2, 4}  # 8 shared no block
    step = chained_step(graph, 2, 4)
    assert step.step == pytest.approx(math.log(0.960 / 0.9605) + math.log(0.920 / 1.000))  # 2 -> 0 -> 4
    assert step.se == pytest.approx(math.sqrt(2 * (0.01 * math.sqrt(2)) ** 2))  # two links of 1+1 trials
    assert step.blocks == (1, 2)
    assert chained_step(graph, 2, 8) is None


def test_drift_is_evident_until_two_blocks_say_otherwise():
    noise = {CASE: (0.002, 4)}
    assert drift_evident(ENDS, [0, 8], noise)  # no block yet: measure the first probes side by side
    steady = {0: obs([1.000, 1.002, 0.998, 1.001, 0.999], [None, None, None, 1, 2]), 2: obs([1.0], [2]),
              4: obs([0.92], [1]), 8: ENDS[8]}
    assert not drift_evident(steady, [0, 2, 4, 8], noise)
    assert drift_evident(DRIFTED, [0, 2, 4, 8], noise)  # block 2's reference read 4% low: 20 noises
    assert block_deviations(DRIFTED[0], CASE)[1] == pytest.approx(
        (math.log(0.960) - sum(math.log(v) for v in (1.000, 1.002, 0.998, 1.000)) / 4, 1 + 1 / 4))


def test_short_blocks_alone_leave_the_block_residual_without_degrees_of_freedom():
    assert block_residual(DRIFTED, [0, 2, 4, 8], CASE) is None  # so the search uses the within-round noise


def issue_history(step_at: int) -> dict:
    """The issue's independent simulation: 500 commits, an 8% step, 2% per-sample noise, a 2%
    round drift that the control does not cancel."""
    return {"commits": 500, "samples_per_trial": 20, "process_drift_cv": 0.02,
            "control": {"value": 1000.0, "cv": 0.01}, "drift": {"round_cv": 0.02},
            "cases": {"k": {"cv": 0.02, "levels": [[0, 1000.0], [step_at, 920.0]]}}}


@pytest.mark.parametrize("seed,step_at", [(21, 200), (29, 71), (55, 141)])
def test_the_issues_missed_steps_are_found_when_the_search_is_side_by_side(seed, step_at):
    history = load_history(issue_history(step_at))
    before = simulate(history, seed=seed, config=ACROSS_ROUNDS)
    after = simulate(history, seed=seed, config=SEARCH)
    assert before["culprits"] == []  # what the issue reports: 3 of 60 such runs missed the step
    assert [c["range"] for c in after["culprits"]] == [[step_at, step_at]]


def test_drift_between_blocks_and_per_trial_are_history_fields():
    history = load_history({**issue_history(10), "drift": {"round_cv": 0.01, "block_cv": 0.02, "trial_cv": 0.005}})
    assert (history.drift.block_cv, history.drift.trial_cv) == (0.02, 0.005)
    quiet = simulate(load_history(issue_history(10)), seed=1, config=SEARCH)
    noisy = simulate(history, seed=1, config=SEARCH)
    assert quiet != noisy  # the draws reach the trials
