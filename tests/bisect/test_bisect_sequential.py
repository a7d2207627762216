"""Sequential decisions and trial-level intervals, each rule pinned on small literal series."""

import math
from pathlib import Path

import pytest
from scipy import stats

from perfbisect.service.bisect import BisectConfig, Observation, RevisionState, TrialRequest, Verdict, assess, plan_next
from perfbisect.service.bisect.effect import t_effect
from perfbisect.service.bisect.history import load_history
from perfbisect.service.bisect.simulate import simulate

LEVEL = [1.000, 1.002, 0.998, 1.001, 0.999]
BENCH = Path(__file__).resolve().parents[2] / "bench" / "histories"


def ok(*values_by_case):
    return Observation(RevisionState.ok, dict(values_by_case))


def test_one_trial_many_noise_widths_from_a_level_is_different():
    c = assess(LEVEL, [0.90], min_effect=0.02, noise=0.002, noise_df=8, sequential_alpha=0.001)
    assert c.verdict == Verdict.DIFFERENT
    assert c.pvalue > 0.1 and c.seq_pvalue < 1e-6  # the rank tests alone could never decide 5 vs 1
    assert c.trials == (5, 1)


def test_the_noise_estimate_s_own_uncertainty_asks_for_a_wider_gap():
    # 8 noise widths: decisive with 8 degrees of freedom, not with 1 (Student's t, not the normal)
    gap = [math.exp(-8 * 0.002 * math.sqrt(1 + 1 / 5))]
    assert assess(LEVEL, gap, min_effect=0.01, noise=0.002, noise_df=8,
                  sequential_alpha=0.001).verdict == Verdict.DIFFERENT
    assert assess(LEVEL, gap, min_effect=0.01, noise=0.002, noise_df=1,
                  sequential_alpha=0.001).verdict == Verdict.UNKNOWN
    assert assess(LEVEL, gap, min_effect=0.01, noise=0.002).verdict == Verdict.UNKNOWN  # route off


def test_a_gap_below_the_minimum_effect_is_never_different():
    c = assess(LEVEL, [0.99], min_effect=0.02, noise=0.0005, noise_df=20, sequential_alpha=0.001)
    assert c.seq_pvalue < 1e-6 and c.verdict != Verdict.DIFFERENT


def test_ends_start_small_and_an_interior_revision_gets_one_trial():
    config = BisectConfig()
    assert plan_next(33, {}, config).requests == (TrialRequest(0, 3), TrialRequest(32, 3))
    plan = plan_next(33, {0: ok(("a", LEVEL[:3])), 32: ok(("a", [0.80, 0.801, 0.799]))}, config)
    assert plan.requests == (TrialRequest(16, 1),)


def test_ambiguous_ends_get_more_trials_before_anything_is_built():
    # a 3% gap with 1.5% noise: neither DIFFERENT nor SAME on 3 trials a side
    plan = plan_next(33, {0: ok(("a", [1.00, 1.015, 0.985])), 32: ok(("a", [0.97, 0.985, 0.955]))},
                     BisectConfig())
    assert plan.requests == (TrialRequest(0, 2), TrialRequest(32, 2))


def test_a_single_trial_between_the_levels_is_measured_again():
    # 1% noise on 4 degrees of freedom: a 5% gap to either level is neither many widths nor SAME
    ends = {0: ok(("a", [1.0, 1.01, 0.99])), 32: ok(("a", [0.90, 0.909, 0.891]))}
    plan = plan_next(33, {**ends, 16: ok(("a", [0.95]))}, BisectConfig())
    assert plan.requests == (TrialRequest(16, 2),)  # no build until 16 is placed
    plan = plan_next(33, {**ends, 16: ok(("a", [0.90]))}, BisectConfig())
    assert plan.requests == (TrialRequest(8, 1),)  # at the bad level: 10 widths, decided on one


def test_one_trial_decides_the_side_and_the_search_moves_on():
    ends = {0: ok(("a", LEVEL[:3])), 32: ok(("a", [0.80, 0.801, 0.799]))}
    plan = plan_next(33, {**ends, 16: ok(("a", [0.8005]))}, BisectConfig())
    assert plan.requests == (TrialRequest(8, 1),)
    assert plan.open_pairs == ((0, 16),)


def test_a_culprit_on_one_trial_a_side_is_replicated_before_it_is_reported():
    observations = {0: ok(("a", LEVEL[:3])), 15: ok(("a", [1.0005])), 16: ok(("a", [0.8005])),
                    32: ok(("a", [0.80, 0.801, 0.799]))}
    observations.update({i: ok(("a", [1.0])) for i in range(1, 15)})
    plan = plan_next(33, observations, BisectConfig())
    assert plan.culprits == ()
    assert plan.requests == (TrialRequest(15, 1), TrialRequest(16, 1))
    observations[15] = ok(("a", [1.0005, 0.9995]))
    observations[16] = ok(("a", [0.8005, 0.7995]))
    plan = plan_next(33, observations, BisectConfig())
    assert [(c.first, c.last) for c in plan.culprits] == [(16, 16)]


def test_one_outlier_trial_is_not_a_culprit_its_replicate_inflates_the_noise():
    # revision 1 drew one trial in a rare mode 20% low: the pair (0, 1) looks like a step until
    # its second trial comes back normal and the pooled noise takes in the outlier
    ends = {0: ok(("a", LEVEL[:3])), 2: ok(("a", [0.80, 0.801, 0.799]))}
    plan = plan_next(3, {**ends, 1: ok(("a", [0.80]))}, BisectConfig())
    assert plan.culprits == () and TrialRequest(1, 1) in plan.requests
    plan = plan_next(3, {**ends, 1: ok(("a", [0.80, 1.001]))}, BisectConfig())
    assert plan.culprits == () and not plan.done


def test_t_interval_is_the_median_step_plus_minus_t_pooled_noise():
    effect = t_effect([1.0, 1.02], [0.9, 0.918], noise=0.01, df=4, confidence=0.95)
    half = stats.t.ppf(0.975, 4) * 0.01 * math.sqrt(1 / 2 + 1 / 2)  # medians of two are means
    assert effect.rel == pytest.approx(-0.1)
    assert effect.ci == pytest.approx((math.expm1(math.log(0.9) - half), math.expm1(math.log(0.9) + half)))
    assert effect.before == pytest.approx(1.01) and effect.after == pytest.approx(0.909)
    wider = t_effect([1.0, 1.02, 1.01], [0.9, 0.918, 0.909], noise=0.01, df=1)
    assert wider.ci[1] - wider.ci[0] > effect.ci[1] - effect.ci[0]  # 1 df: a far larger quantile
    with pytest.raises(ValueError):
        t_effect([1.0], [0.9], noise=0.01, df=0)


@pytest.mark.parametrize("name,limit", [("large_step_two_cases", 14), ("step_8pct_cv1", 18)])
def test_issue_12_histories_within_their_trial_targets(name, limit):
    history = load_history(BENCH / f"{name}.json")
    for seed in (0, 1, 2):
        result = simulate(history, seed=seed)
        assert len(result["culprits"]) == 1 and result["culprits"][0]["revision"] in (23, 41)
        assert result["trials"] <= limit


# A machine's rare slow mode: on a CPU runner a few trials in a hundred run 2-3x slower on the
# target than on its control (seen on the demo's Python-heavy CPU gemm). Two such trials on one
# revision are as far from their neighbours as a real step; the t route alone would blame it.

def test_a_trial_far_outside_its_revision_s_spread_marks_the_case_heavy_tailed():
    from perfbisect.service.bisect.pairs import heavy_tailed

    clean = [[0.40, 0.41, 0.395], [0.398, 0.404], [0.402, 0.399, 0.41, 0.401]]
    assert not heavy_tailed(clean)
    assert heavy_tailed(clean + [[0.158, 0.391, 0.148]])  # one revision, two trials in the rare mode
    assert not heavy_tailed([[0.4, 0.16]])  # too few trials to tell a spread from an outlier


def test_a_rare_mode_at_the_bad_end_is_confirmed_by_the_rank_tests_only():
    # Every revision before the bad end measured twice on one level (0.5% noise); the bad end's
    # three trials: two in the rare mode, so its median is there. Pooled over 30 degrees of
    # freedom the end sits 5.6 noise widths from revision 27: the t route alone would name 28
    # with two trials a side. The outlier marks the case heavy-tailed: the rank tests decide,
    # on confirm_trials (5) a side.
    observations = {i: ok(("a", [0.4 * (1 + 0.005 * (i % 3 - 1)), 0.4 * (1 - 0.005 * (i % 3 - 1))]))
                    for i in range(28)}
    observations[28] = ok(("a", [0.158, 0.391, 0.148]))
    plan = plan_next(29, observations, BisectConfig(min_effect=0.15))
    assert not plan.culprits
    assert set(plan.requests) == {TrialRequest(27, 3), TrialRequest(28, 2)}


def test_a_revision_apart_from_both_neighbours_is_a_spike_the_rank_tests_must_confirm():
    # Revision 24's two trials both fell in a rare mode (0.4x): a drop at 24 and a recovery at
    # 25 on the t route. Nothing else shows the mode, so only the spike's shape gives it away.
    observations = {0: ok(("a", [0.200, 0.201, 0.199])), 12: ok(("a", [0.2])), 18: ok(("a", [0.201])),
                    23: ok(("a", [0.199, 0.2])), 24: ok(("a", [0.052, 0.054])),
                    25: ok(("a", [0.199, 0.202])), 28: ok(("a", [0.200, 0.198, 0.201]))}
    plan = plan_next(29, observations, BisectConfig(min_effect=0.15))
    assert not plan.culprits
    assert TrialRequest(24, 3) in plan.requests  # to confirm_trials (5) on the spike


def test_a_step_and_its_fix_in_the_next_commit_are_still_both_named():
    # A real one-commit regression: the spike holds up under the rank tests' trials.
    spike = [0.100, 0.101, 0.099, 0.1005, 0.0995]
    level = [0.200, 0.201, 0.199, 0.2005, 0.1995]
    observations = {0: ok(("a", level[:3])), 12: ok(("a", [0.2])), 18: ok(("a", [0.201])),
                    23: ok(("a", level)), 24: ok(("a", spike)), 25: ok(("a", level)),
                    28: ok(("a", level[:3]))}
    plan = plan_next(29, observations, BisectConfig(min_effect=0.15))
    assert [(c.first, c.last) for c in plan.culprits] == [(24, 24), (25, 25)]
