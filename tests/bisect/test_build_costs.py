"""Cost-aware probes (issue 45) on literal histories and costs: the expected build costs, the
choice among revisions near an open pair's midpoint, the planner's round, and simulated bisects
that keep the revision bound and the culprits while paying for fewer build seconds."""

import math

import pytest

from perfbisect.service.bisect import BisectConfig, Observation, RevisionState, plan_next
from perfbisect.service.bisect.buildcost import expected_costs, rebuild_cost, touch_costs
from perfbisect.service.bisect.history import HistoryError, load_history
from perfbisect.service.bisect.probes import allocate, near_midpoint
from perfbisect.service.bisect.simulate import format_simulation, simulate


def test_expected_costs_count_the_commits_between_a_revision_and_the_nearest_built_one() -> None:
    touch = [0, 0, 5, 0, 30, 0, 0]
    assert expected_costs(touch, 60, ()) == (60,) * 7  # nothing built: a full build each
    assert expected_costs(touch, 60, {0, 6}) == (0, 0, 5, 5, 0, 0, 0)
    assert expected_costs(touch, 20, {0}) == (0, 0, 5, 5, 20, 20, 20)  # never above a full build
    assert rebuild_cost(6, 2, touch, 60) == 30 and rebuild_cost(2, 6, touch, 60) == 30


def test_touch_costs_from_changed_paths() -> None:
    changed = [[], ["pkg/ops.py"], ["tests/test_x.py"], ["csrc/a.cpp"], ["csrc/a.cpp", "csrc/b.cu"], ["csrc/k.h"]]
    assert touch_costs(changed, unit_seconds=8, full=30) == (0, 0, 0, 8, 16, 30)


def test_near_midpoint_never_costs_a_probe_more() -> None:
    assert near_midpoint(list(range(1, 10))) == [4, 5, 6]  # 9 candidates: larger side at most 5
    assert near_midpoint(list(range(1, 8))) == [4]  # 7 = 2^3 - 1: only the midpoint keeps 3 probes
    assert near_midpoint([1, 2]) == [1, 2] and near_midpoint([5]) == [5]
    for m in range(1, 200):
        worst = math.ceil(math.log2(m + 1))
        for c in near_midpoint(list(range(m))):
            larger = max(c, m - 1 - c)
            assert 1 + math.ceil(math.log2(larger + 1)) <= worst, (m, c)


def test_allocate_probes_the_cheapest_of_the_near_midpoint_revisions() -> None:
    costs = [60.0] * 11
    assert allocate([(0, 10)], 1, {}) == [5]
    assert allocate([(0, 10)], 1, {}, costs) == [5]  # all alike: the midpoint, as without costs
    costs[4] = 0.0
    assert allocate([(0, 10)], 1, {}, costs) == [4]
    costs[4], costs[2] = 60.0, 0.0  # cheaper, but too far from the midpoint
    assert allocate([(0, 10)], 1, {}, costs) == [5]
    costs7 = [0.0 if r == 3 else 60.0 for r in range(9)]
    assert allocate([(0, 8)], 1, {}, costs7) == [4]  # 7 candidates: only the midpoint keeps the bound


def observed(value: float, trials: int = 3) -> Observation:
    return Observation(RevisionState.ok, {"k": tuple(value * (1 + 0.001 * i) for i in range(trials))})


def test_the_planner_probes_the_cheap_revision_of_an_open_pair() -> None:
    obs = {0: observed(100.0), 20: observed(60.0)}
    plain = plan_next(21, obs, BisectConfig())
    assert [r.revision for r in plain.requests] == [10]
    costs = tuple(0.0 if r == 9 else 120.0 for r in range(21))
    aware = plan_next(21, obs, BisectConfig(build_costs=costs))
    assert [r.revision for r in aware.requests] == [9]


def compiled_history(touch: list[float], steps: list[list], seed_cv: float = 0.01) -> dict:
    return {"commits": len(touch) - 1, "samples_per_trial": 20, "process_drift_cv": 0.02,
            "control": {"value": 100.0, "cv": 0.01}, "cases": {"k": {"cv": seed_cv, "levels": steps}},
            "build": {"touch_s": touch, "full_s": 30.0, "trial_s": 2.0}}


# 40 commits: four touch a translation unit each (8 s), around the midpoint; the rest touch only
# Python or tests. The regression is at 10, a Python-only commit.
TOUCH = [8.0 if i in (18, 19, 21, 23) else 0.0 for i in range(41)]


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_cost_aware_bisect_keeps_the_culprit_and_the_bound_and_builds_for_less(seed) -> None:
    h = load_history(compiled_history(TOUCH, [[0, 100.0], [10, 85.0]]))
    full = simulate(h, seed=seed, incremental=False)
    plain = simulate(h, seed=seed)
    aware = simulate(h, seed=seed, cost_aware=True)
    for r in (full, plain, aware):
        assert [c["revision"] for c in r["culprits"]] == [10]
        assert r["revisions_measured"] <= 1 * math.ceil(math.log2(40)) + 2 + 2
    assert full["build_s"] == 30.0 * full["builds"]
    # the ends are full builds; then the midpoint 20 costs 16 s (two touched units either way),
    # while 17, as near, costs nothing from revision 0's tree
    assert plain["build_s"] == 60.0 + 16.0 and aware["build_s"] == 60.0
    assert aware["wall_s"] < plain["wall_s"] < full["wall_s"] / 2
    assert "simulated wall time" in format_simulation(aware)


def test_a_malformed_build_model_is_refused() -> None:
    with pytest.raises(HistoryError, match="touch_s"):
        load_history(compiled_history([1.0, 2.0], [[0, 100.0]]) | {"commits": 5})
    with pytest.raises(HistoryError, match="touch_s"):
        load_history(compiled_history([1.0, -2.0], [[0, 100.0]]))


def test_the_builds_still_expected_count_this_rounds_and_the_future_probes() -> None:
    from perfbisect.service.bisect.progress import expected_build_s

    obs = {0: observed(100.0), 20: observed(60.0)}
    costs = tuple(0.0 if r in (0, 20) else 10.0 for r in range(21))
    plan = plan_next(21, obs, BisectConfig(build_costs=costs))
    left, now = expected_build_s(obs, plan, costs, fallback=99.0, n=21)
    assert now == [(10, 10.0)]
    # 19 untried revisions: 5 probes at worst, one this round; 4 more at their pair's mean cost
    assert left == 10.0 + 4 * 10.0
    assert expected_build_s(obs, plan, (), fallback=7.0, n=21) == (7.0 + 4 * 7.0, [(10, 7.0)])
