"""Verdicts, effect sizes and the significance strategies, on literal samples."""

import pytest

from perfbisect.service.bisect import CaseEffect, RankTest, Verdict, WelchTest, assess, compare
from perfbisect.service.bisect.effect import bootstrap_effect

BASE = [1.000, 1.004, 0.998, 1.002, 0.999, 1.001]
DROP = [0.900, 0.903, 0.897, 0.902, 0.899, 0.901]


def test_clear_step_is_different_and_direction_is_reported():
    c = assess(BASE, DROP, min_effect=0.02)
    assert c.verdict == Verdict.DIFFERENT
    assert c.rel == pytest.approx(-0.1, abs=0.005)
    assert c.pvalue < 0.01


def test_close_values_with_low_noise_are_same():
    assert compare(BASE, [1.001, 0.999, 1.003], min_effect=0.02, noise=0.002) == Verdict.SAME


def test_three_against_three_cannot_reach_alpha_so_a_step_is_unknown():
    # the smallest two-sided rank-test p for 3 vs 3 is 0.1
    assert compare(BASE[:3], DROP[:3], min_effect=0.02) == Verdict.UNKNOWN


def test_significant_but_below_min_effect_is_not_different():
    a = [1.000, 1.001, 1.000, 0.999, 1.000, 1.001]
    b = [0.990, 0.991, 0.990, 0.989, 0.990, 0.991]
    c = assess(a, b, min_effect=0.02, noise=0.001)
    assert c.pvalue < 0.01
    assert c.verdict == Verdict.SAME


def test_noise_makes_same_unreachable_until_the_cap():
    a = [1.00, 1.08, 0.93, 1.05]
    b = [0.97, 1.06, 0.95, 1.02]
    assert compare(a, b, min_effect=0.02) == Verdict.UNKNOWN
    assert compare(a, b, min_effect=0.02, at_cap=True) == Verdict.SAME  # conservative: no blame


def test_nonpositive_values_are_refused():
    with pytest.raises(ValueError):
        assess([1.0, 0.0], [1.0, 1.0], min_effect=0.02)


def test_significance_strategies():
    assert RankTest().pvalue(BASE, DROP) < 0.01
    assert RankTest().pvalue(BASE, BASE) == 1.0
    assert WelchTest().pvalue(BASE, DROP) < 1e-6
    assert WelchTest().pvalue([1.0], [2.0]) == 1.0


def test_bootstrap_effect_interval_holds_the_step():
    effect = bootstrap_effect(BASE, DROP, seed=3)
    assert effect.rel == pytest.approx(-0.1, abs=0.005)
    assert effect.ci[0] <= effect.rel <= effect.ci[1]
    assert effect.ci[1] < -0.09
    assert effect.before == pytest.approx(1.0005, abs=1e-3)
    assert effect == bootstrap_effect(BASE, DROP, seed=3)  # deterministic


def test_regression_direction():
    assert CaseEffect(-0.1, (-0.11, -0.09), 1.0, 0.9).is_regression(higher_is_better=True)
    assert not CaseEffect(-0.1, (-0.11, -0.09), 1.0, 0.9).is_regression(higher_is_better=False)
