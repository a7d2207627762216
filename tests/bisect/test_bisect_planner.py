"""The planner on literal small histories, driven through the simulator's noise model.
Each history is run over a few fixed seeds: the assertions must hold for every one."""

import pytest

from perfbisect.service.bisect import BisectConfig, Observation, Plan, RevisionState, TrialRequest, plan_next
from perfbisect.service.bisect.history import load_history
from perfbisect.service.bisect.simulate import simulate

SEEDS = (0, 1, 2)


def history(levels_by_case, commits=40, cv=0.01, **extra):
    return load_history({
        "commits": commits, "samples_per_trial": 20, "process_drift_cv": 0.02,
        "control": {"value": 100.0, "cv": 0.01},
        "cases": {name: {"cv": cv, "levels": levels} for name, levels in levels_by_case.items()},
        **extra,
    })


def culprit_revisions(result):
    return [c["revision"] for c in result["culprits"]]


@pytest.mark.parametrize("seed", SEEDS)
def test_one_step(seed):
    result = simulate(history({"a": [[0, 100.0], [23, 88.0]]}), seed=seed)
    assert culprit_revisions(result) == [23]
    effect = result["culprits"][0]["cases"]["a"]
    assert effect["ci"][0] <= -0.12 + 0.02 and effect["ci"][1] >= -0.12 - 0.02
    assert effect["before"] == pytest.approx(100.0, rel=0.05)
    assert effect["after"] == pytest.approx(88.0, rel=0.05)


@pytest.mark.parametrize("seed", SEEDS)
def test_two_steps(seed):
    result = simulate(history({"a": [[0, 100.0], [9, 90.0], [31, 80.0]]}), seed=seed)
    assert culprit_revisions(result) == [9, 31]


@pytest.mark.parametrize("seed", SEEDS)
def test_step_on_one_shape_only_is_found_and_reported_per_shape(seed):
    h = history({"small": [[0, 100.0]], "mid": [[0, 100.0]], "large": [[0, 100.0], [17, 91.0]]})
    result = simulate(h, seed=seed)
    assert culprit_revisions(result) == [17]
    cases = result["culprits"][0]["cases"]
    assert set(cases) == {"small", "mid", "large"}
    assert cases["large"]["rel"] == pytest.approx(-0.09, abs=0.02)
    assert abs(cases["small"]["rel"]) < 0.02 and abs(cases["mid"]["rel"]) < 0.02


@pytest.mark.parametrize("seed", SEEDS)
def test_regression_then_partial_recovery_both_found(seed):
    result = simulate(history({"a": [[0, 100.0], [12, 85.0], [29, 93.0]]}), seed=seed)
    assert culprit_revisions(result) == [12, 29]
    rels = [c["cases"]["a"]["rel"] for c in result["culprits"]]
    assert rels[0] < -0.1 and rels[1] > 0.05


@pytest.mark.parametrize("seed", SEEDS)
def test_unbuildable_run_hiding_the_step_gives_a_range(seed):
    h = history({"a": [[0, 100.0], [21, 88.0]]}, unbuildable=[19, 20, 21, 22])
    result = simulate(h, seed=seed)
    assert len(result["culprits"]) == 1
    culprit = result["culprits"][0]
    assert culprit["range"] == [19, 23]  # 18 is the last good build, 23 the first bad one
    assert culprit["revision"] is None  # never blame the first buildable revision


@pytest.mark.parametrize("seed", SEEDS)
def test_unbuildable_run_beside_the_step_keeps_it_exact(seed):
    h = history({"a": [[0, 100.0], [25, 88.0]]}, unbuildable=[20, 21, 22])
    assert culprit_revisions(simulate(h, seed=seed)) == [25]


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_results_range_is_a_correctness_finding_not_a_culprit(seed):
    # the search's first midpoint (20) fails the accuracy check; both ends of the run are pinned
    h = history({"a": [[0, 100.0], [30, 88.0]]}, wrong_results=[[15, 25]])
    result = simulate(h, seed=seed)
    assert result["correctness"] == [{"first_bad": 15, "fixed_at": 25}]
    assert culprit_revisions(result) == [30]


@pytest.mark.parametrize("seed", SEEDS)
def test_step_inside_a_wrong_results_run_is_a_range(seed):
    h = history({"a": [[0, 100.0], [20, 88.0]]}, wrong_results=[[18, 23]])
    result = simulate(h, seed=seed)
    assert result["correctness"] == [{"first_bad": 18, "fixed_at": 23}]
    assert [c["range"] for c in result["culprits"]] == [[18, 23]]


@pytest.mark.parametrize("seed", SEEDS)
def test_no_step_measures_only_the_ends(seed):
    result = simulate(history({"a": [[0, 100.0]], "b": [[0, 50.0]]}), seed=seed)
    assert result["culprits"] == [] and result["correctness"] == []
    assert result["revisions_measured"] == 2


@pytest.mark.parametrize("seed", range(6))
def test_pure_noise_at_cv_ten_percent_blames_nothing(seed):
    h = history({"a": [[0, 100.0]], "b": [[0, 30.0]]}, commits=60, cv=0.10)
    assert simulate(h, seed=seed, workers=4)["culprits"] == []


SEED_1009 = {  # the #1009 table: TFLOP/s at S = 61,380 / 180,180 / 239,580; aiter as control
    "commits": 7, "samples_per_trial": 20, "process_drift_cv": 0.02, "control": {"value": 1254.0, "cv": 0.01},
    "cases": {
        "S=61380": {"cv": 0.01, "levels": [[0, 1284.6], [1, 1256.7], [2, 1255.6], [3, 1256.0], [4, 1260.5],
                                           [5, 1254.1], [6, 1251.8], [7, 1249.3]]},
        "S=180180": {"cv": 0.01, "levels": [[0, 1288.2], [1, 1188.1], [2, 1187.9], [3, 1182.8], [4, 1188.6],
                                            [5, 1077.0], [6, 1074.9], [7, 1073.9]]},
        "S=239580": {"cv": 0.01, "levels": [[0, 1286.8], [1, 1184.3], [2, 1187.2], [3, 1183.6], [4, 1183.4],
                                            [5, 1060.9], [6, 1060.6], [7, 1059.0]]},
    },
    "higher_is_better": True,
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("workers", (1, 4))
def test_seed_1009_both_culprits_and_no_third(seed, workers):
    result = simulate(load_history(SEED_1009), workers=workers, seed=seed)
    assert culprit_revisions(result) == [1, 5]  # 772f070 (#950 via #974's range) and daee90e (#930)
    first, second = (c["cases"] for c in result["culprits"])
    assert first["S=180180"]["rel"] == pytest.approx(-0.078, abs=0.02)
    assert second["S=239580"]["rel"] == pytest.approx(-0.104, abs=0.02)
    assert abs(second["S=61380"]["rel"]) < 0.02  # the short sequence does not move at #930


def test_more_workers_take_fewer_rounds():
    h = history({"a": [[0, 100.0], [150, 90.0]]}, commits=400)
    one, eight = simulate(h, workers=1, seed=0), simulate(h, workers=8, seed=0)
    assert culprit_revisions(one) == culprit_revisions(eight) == [150]
    assert eight["rounds"] < one["rounds"]
    assert one["revisions_measured"] <= 1 * 9 + 2 + 2  # k*ceil(log2 N) + 2k + 2


def test_first_round_measures_the_ends_and_arguments_are_checked():
    config = BisectConfig()
    plan = plan_next(10, {}, config)
    assert not plan.done
    assert plan.requests == (TrialRequest(0, config.endpoint_trials), TrialRequest(9, config.endpoint_trials))
    with pytest.raises(ValueError):
        plan_next(1, {}, config)
    with pytest.raises(ValueError):
        plan_next(5, {7: Observation(RevisionState.ok, {"a": [1.0]})}, config)
    with pytest.raises(ValueError, match="max_trials"):
        plan_next(5, {}, BisectConfig(max_trials=4))  # 4 vs 4 can never reach p < 0.01


def test_a_low_cap_still_confirms_and_finishes():
    h = history({"a": [[0, 100.0], [23, 88.0]]})
    result = simulate(h, seed=0, config=BisectConfig(max_trials=5, endpoint_trials=6, confirm_trials=6))
    assert culprit_revisions(result) == [23]


def test_ends_same_on_every_case_ends_the_job():
    same = Observation(RevisionState.ok, {"a": [1.0, 1.001, 0.999, 1.0, 1.002, 0.998]})
    plan = plan_next(50, {0: same, 49: same}, BisectConfig())
    assert plan.done and plan.culprits == () and plan.requests == ()


def test_unbuildable_good_end_moves_to_its_neighbour():
    ok = Observation(RevisionState.ok, {"a": [1.0] * 6})
    plan = plan_next(20, {0: Observation(RevisionState.unbuildable), 19: ok}, BisectConfig())
    assert [r.revision for r in plan.requests] == [1]


def test_a_walk_from_failed_ends_stops_two_in_while_nothing_has_built():
    broken = Observation(RevisionState.unbuildable)
    second = plan_next(20, {0: broken, 19: broken, 1: broken, 18: broken}, BisectConfig())
    assert [r.revision for r in second.requests] == [2, 17]
    given_up = plan_next(20, {i: broken for i in (0, 1, 2, 17, 18, 19)}, BisectConfig())
    assert given_up.done and given_up.requests == () and given_up.culprits == ()
    # one revision that built anywhere, and the walk from the other end goes on
    ok = Observation(RevisionState.ok, {"a": [1.0] * 6})
    walking = plan_next(20, {0: broken, 1: broken, 2: broken, 19: ok}, BisectConfig())
    assert [r.revision for r in walking.requests] == [3]


def test_a_build_broken_at_every_revision_costs_six_builds_not_forty():
    h = history({"a": [[0, 100.0]]}, commits=40, unbuildable=list(range(41)))
    result = simulate(h, seed=0)
    assert result["revisions_measured"] == 6 and result["rounds"] == 3 and result["culprits"] == []


def test_lower_is_better_metric_and_the_shortest_range():
    h = history({"ms": [[0, 1.00], [1, 1.15]]}, commits=1, higher_is_better=False)
    result = simulate(h, seed=0)
    assert culprit_revisions(result) == [1]
    assert result["culprits"][0]["cases"]["ms"]["rel"] == pytest.approx(0.15, abs=0.03)


def test_everything_inside_unbuildable_blames_the_whole_range():
    h = history({"a": [[0, 100.0], [4, 80.0]]}, commits=8, unbuildable=[1, 2, 3, 4, 5, 6, 7])
    result = simulate(h, seed=0)
    assert [c["range"] for c in result["culprits"]] == [[1, 8]]


def test_trials_are_dispatched_round_robin_over_the_requested_revisions():
    """Side by side trials come from different revisions while more than one is requested, so a
    slow spell of the machine cannot fall on one revision's trials only."""
    plan = Plan((TrialRequest(3, 3), TrialRequest(4, 2), TrialRequest(9, 1), TrialRequest(3, 1)), done=False)
    assert plan.dispatch_order() == [3, 4, 9, 3, 4, 3, 3]
    assert Plan((), done=True).dispatch_order() == []


def test_failed_trials_count_against_the_cap_so_a_revision_is_not_asked_forever():
    """An end that ran twice and whose later trials all failed (a worker breaking mid-job) gave
    no values past its first two: the planner stops asking there once its attempts, failed ones
    included, reach the cap, and is done, instead of asking for the same trials every round."""
    config = BisectConfig()
    noisy = [1.0, 1.3, 0.8, 1.2, 0.9, 1.1, 1.0, 1.25, 0.85, 1.15]
    good = Observation(RevisionState.ok, {"a": noisy})
    asked = plan_next(20, {0: good, 19: Observation(RevisionState.ok, {"a": [1.1, 0.9]})}, config)
    assert 19 in {r.revision for r in asked.requests}  # two values on a noisy case: more are wanted
    spent = Observation(RevisionState.ok, {"a": [1.1, 0.9]}, failed=config.max_trials - 2)
    assert spent.attempts() == config.max_trials
    plan = plan_next(20, {0: good, 19: spent}, config)
    assert 19 not in {r.revision for r in plan.requests}
    nearly = Observation(RevisionState.ok, {"a": [1.1, 0.9]}, failed=config.max_trials - 3)
    assert TrialRequest(19, 1) in plan_next(20, {0: good, 19: nearly}, config).requests


def test_an_end_whose_every_trial_failed_without_a_value_is_done_at_the_cap():
    config = BisectConfig()
    ok = Observation(RevisionState.ok, {"a": [1.0] * 6})
    empty = Observation(RevisionState.ok, {}, failed=config.max_trials)  # ran, never gave a value
    plan = plan_next(10, {0: ok, 9: empty}, config)
    assert plan.done and plan.requests == ()
    assert not plan_next(10, {0: ok, 9: Observation(RevisionState.ok, {}, failed=1)}, config).done


def test_a_scan_finds_a_step_that_was_undone_inside_the_range() -> None:
    """Issue 28: a 20x slowdown that lasted six commits, with equal ends, ended "unchanged"
    after measuring only the ends. Three scanned interior revisions see it, and the search then
    names both the regression and its fix."""
    from perfbisect.service.bisect.history import CaseModel, History
    from perfbisect.service.bisect.probes import scan_points
    from perfbisect.service.bisect.simulate import run

    assert scan_points(16, 3) == [4, 8, 11] and scan_points(3, 3) == [1] and scan_points(2, 3) == []
    history = History(n_revisions=16, cases={"k": CaseModel(cv=0.01, levels=((0, 1.0), (6, 0.05), (12, 1.0)))})
    plan, _, _ = run(history, BisectConfig(min_effect=0.05, scan=3), seed=1)
    assert sorted((c.first, c.last) for c in plan.culprits) == [(6, 6), (12, 12)]
    blind, _, _ = run(history, BisectConfig(min_effect=0.05), seed=1)
    assert blind.culprits == ()
