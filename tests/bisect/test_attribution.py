"""The attribution arithmetic: recoveries, the interaction term and their intervals, on literal
per-trial values whose logs are round numbers (so every figure can be checked by hand)."""

import math

import pytest

from perfbisect.service.bisect.attribution import (HEAD, AttributionConfig, attribute_case, case_contrasts,
                                                   case_variants, clean_sets, estimate, fix_check, observed, plan_round,
                                                   variants_of)

T_975_8 = 2.306004135204166  # Student's t, 97.5% quantile, 8 degrees of freedom


def arm(*logs):
    return [math.exp(x) for x in logs]


def unpaired(values, case="c"):
    """Arms of one case measured without side-by-side blocks."""
    return {variant: observed({case: x}) for variant, x in values.items()}


def contrasts(values):
    return case_contrasts("c", unpaired(values))


# Four arms of three trials; every arm's logs spread -0.01, 0, +0.01 around its mean, so the
# pooled per-trial noise is exactly 0.01 with 4 * 2 = 8 degrees of freedom.
HEAD_VALUES = arm(-0.01, 0.0, 0.01)
A = arm(0.09, 0.10, 0.11)   # reverting culprit 0 alone: +0.10 in log
B = arm(0.19, 0.20, 0.21)   # culprit 1 alone: +0.20
AB = arm(0.24, 0.25, 0.26)  # both: +0.25, not 0.30: they interact by -0.05


def test_recovery_is_the_log_step_with_a_t_interval():
    r = contrasts({HEAD: HEAD_VALUES, (0,): A, (1,): B, (0, 1): AB}).recovery((0,))
    half = T_975_8 * 0.01 * math.sqrt(2 / 3)
    assert r.log == pytest.approx(0.10)
    assert r.rel == pytest.approx(math.expm1(0.10))
    assert r.ci == pytest.approx((math.expm1(0.10 - half), math.expm1(0.10 + half)))
    assert not r.paired


def test_interaction_is_all_together_minus_the_sum_of_singles():
    term = contrasts({HEAD: HEAD_VALUES, (0,): A, (1,): B, (0, 1): AB}).interaction([(0,), (1,)], (0, 1))
    half = T_975_8 * 0.01 * math.sqrt(4 / 3)  # 1/3 (both) + 1/3 + 1/3 (singles) + 1/3 (head, (k-1)^2 = 1)
    assert term.log == pytest.approx(-0.05)
    assert term.ci == pytest.approx((math.expm1(-0.05 - half), math.expm1(-0.05 + half)))
    assert term.excludes_zero()


def test_three_culprits_weigh_the_head_by_k_minus_one():
    c = arm(0.04, 0.05, 0.06)
    together = arm(0.34, 0.35, 0.36)  # 0.10 + 0.20 + 0.05 = 0.35: additive
    term = contrasts({HEAD: HEAD_VALUES, (0,): A, (1,): B, (2,): c, (0, 1, 2): together}).interaction(
        [(0,), (1,), (2,)], (0, 1, 2))
    assert term.log == pytest.approx(0.0, abs=1e-12)
    assert term.se == pytest.approx(0.01 * math.sqrt(4 / 3 + 4 / 3))  # 4 arms of 1/3, head (3-1)^2/3


def test_one_culprit_cannot_interact():
    with pytest.raises(ValueError):
        contrasts({HEAD: HEAD_VALUES, (0,): A}).interaction([(0,)], (0,))


def test_the_interaction_is_called_at_the_bisects_alpha_not_at_the_95_percent_interval():
    """-0.03 with se 0.01 sqrt(4/3) on 8 degrees of freedom: the 95% interval [-0.057, -0.003]
    excludes 0 and |I| is beyond the 2% minimum effect, but p = 0.033 is above the bisect's
    alpha (0.01): one look of several, it is not called; -0.04 (p = 0.0085) is."""
    cfg = AttributionConfig(min_effect=0.02)
    weak = attribute_case("c", (0, 1), unpaired({HEAD: HEAD_VALUES, (0,): arm(0.09, 0.10, 0.11),
                                                 (1,): arm(0.02, 0.03, 0.04), (0, 1): arm(0.09, 0.10, 0.11)}), cfg)
    assert weak.interaction.log == pytest.approx(-0.03) and weak.interaction.excludes_zero()
    assert weak.verdict == "undetermined"
    strong = attribute_case("c", (0, 1), unpaired({HEAD: HEAD_VALUES, (0,): arm(0.09, 0.10, 0.11),
                                                   (1,): arm(0.03, 0.04, 0.05), (0, 1): arm(0.09, 0.10, 0.11)}), cfg)
    assert strong.interaction.log == pytest.approx(-0.04) and strong.verdict == "interact"


def test_attribute_case_without_blocks_pools_the_noise_and_calls_the_interaction():
    result = attribute_case("c", (0, 1), unpaired({HEAD: HEAD_VALUES, (0,): A, (1,): B, (0, 1): AB}),
                            AttributionConfig(min_effect=0.02))
    assert result.together == (0, 1)
    assert result.interaction.df == 8
    assert result.interaction.log == pytest.approx(-0.05)
    assert result.verdict == "interact"
    assert result.recoveries[(1,)].log == pytest.approx(0.20)


def test_independent_factors_do_not_interact():
    """Two culprits that each scale the time by their own factor add on the log scale; with three
    trials an arm the interval (+-2.7%) is wider than the 2% threshold: undetermined, with six
    (+-1.5%) it is inside it: additive."""
    ab = arm(0.29, 0.30, 0.31)
    three = attribute_case("c", (0, 1), unpaired({HEAD: HEAD_VALUES, (0,): A, (1,): B, (0, 1): ab}),
                           AttributionConfig(min_effect=0.02))
    assert three.interaction.log == pytest.approx(0.0, abs=1e-12)
    assert three.verdict == "undetermined"
    doubled = {v: x * 2 for v, x in {HEAD: HEAD_VALUES, (0,): A, (1,): B, (0, 1): ab}.items()}
    six = attribute_case("c", (0, 1), unpaired(doubled), AttributionConfig(min_effect=0.02))
    assert six.interaction.df == 20
    assert six.interaction.se == pytest.approx(math.sqrt(4 * 0.0004 / 20) * math.sqrt(4 / 6))
    assert six.verdict == "additive"


def test_a_conflicting_culprit_leaves_no_interaction():
    result = attribute_case("c", (0, 1), unpaired({HEAD: HEAD_VALUES, (1,): B}), AttributionConfig())
    assert result.interaction is None and result.verdict is None
    assert set(result.recoveries) == {(1,)}


def test_variants_are_every_subset_up_to_three_then_singles_and_all():
    assert variants_of([0, 1]) == [(0,), (1,), (0, 1)]
    assert len(variants_of([0, 1, 2])) == 7
    assert variants_of([0, 1, 2, 3]) == [(0,), (1,), (2,), (3,), (0, 1, 2, 3)]


def test_each_case_gets_the_subsets_of_its_own_culprits_even_when_a_culprit_is_shared():
    """The demo's run where #945 (index 4) was named on gemm and, falsely, on RMSNorm: grouped
    together the five culprits measured singles and all five (which did not revert), so RMSNorm's
    #905+#908 pair was never measured together and its interaction was lost."""
    cases = {"gemm": [2, 3, 4], "rmsnorm": [0, 1, 4]}
    variants = case_variants(cases)
    assert (0, 1) in variants and (0, 1, 4) in variants and (2, 3, 4) in variants
    assert len(variants) == 13  # 7 + 7, the single (4,) once
    assert case_variants({"a": [0, 1], "b": [0, 1]}) == [(0,), (1,), (0, 1)]


def test_plan_round_brings_every_live_arm_to_the_same_count_and_stops():
    cases = {"c": (0, 1)}
    variants = [(0,), (1,), (0, 1)]
    first = plan_round(cases, variants, {}, {}, set())
    assert first.requests == {HEAD: 3, (0,): 3, (1,): 3, (0, 1): 3} and not first.done
    conflicted = plan_round(cases, variants, {}, {HEAD: 3, (0,): 3, (1,): 3, (0, 1): 3}, {(0,), (0, 1)})
    assert set(conflicted.requests) <= {HEAD, (1,)}
    values = {HEAD: {"c": HEAD_VALUES}, (0,): {"c": A}, (1,): {"c": B}, (0, 1): {"c": AB}}
    attempts = {v: 3 for v in values}
    done = plan_round(cases, variants, {v: observed(x) for v, x in values.items()}, attempts, set(),
                      AttributionConfig(min_effect=0.02))
    assert done.done
    capped = plan_round(cases, variants, {}, {v: 12 for v in values}, set())
    assert capped.done and not capped.requests


def test_fix_check_splits_the_loss_and_names_the_remainder():
    """Steps of -20% and -30% (lost: log 0.56); the PR recovers +42.9% (log 1/0.7). With the
    attribution (culprit 0 alone +25%, culprit 1 alone +42.9%, both +78.6%) the PR fixed culprit 1
    and culprit 0 explains the rest: log(1/0.56) - log(1/0.7) = log(1.25)."""
    plain = fix_check([-0.2, -0.3], 1 / 0.7 - 1)
    assert plain.lost == pytest.approx(math.log(0.56)) and plain.left == pytest.approx(math.log(0.8))
    assert plain.share == pytest.approx(math.log(1 / 0.7) / -math.log(0.56)) and plain.fixes is None
    singles = {0: estimate(math.log(1.25), 0.01, 8), 1: estimate(math.log(1 / 0.7), 0.01, 8)}
    checked = fix_check([-0.2, -0.3], 1 / 0.7 - 1, estimate(math.log(1 / 0.56), 0.01, 8), singles)
    assert checked.fixes == 1
    assert checked.predicted_left.rel == pytest.approx(0.25)
    assert checked.predicted_left.se == pytest.approx(0.01 * math.sqrt(2))


def test_the_sentence_names_the_culprit_whose_cost_depends_on_the_other():
    """The demo's pair as measured (a CLI run): #905 reverted +187.4%, #908 +80.3%, both +194.3%.
    #908's cost nearly vanishes without #905 (+2.4%): that is the culprit the sentence is about."""
    from perfbisect.service.attribution.report import words
    from perfbisect.service.bisect.attribution import CaseAttribution

    def rec(rel):
        return estimate(math.log1p(rel), 0.02, 10)

    result = CaseAttribution("rmsnorm", (0, 1), {(0,): rec(1.874), (1,): rec(0.803), (0, 1): rec(1.943)}, (0, 1),
                             estimate(math.log(2.943 / (2.874 * 1.803)), 0.03, 10), "interact")
    text = words(result, ["#905", "#908"], {})
    assert text.startswith("Reverting #905 alone recovers 187.4%; #908 alone 80.3%; both 194.3%: they interact (-43.2%")
    assert "#908 costs 80.3% with #905 in, 2.4% without it. " in text
    # built without per-trial values, it has no clean sets: the sentence says they are not resolved
    assert text.endswith("Which of them must be reverted to recover the loss is not resolved at this noise.")


# Clean sets: three trials an arm with the pooled noise 0.01 (8 degrees of freedom for four arms):
# a set's shortfall against all together has the half-width t * 0.01 * sqrt(2/3) = 0.0188, under
# the 2% minimum effect (log 1.02 = 0.0198) only for a set that recovers all of it.
HALF_2_3 = T_975_8 * 0.01 * math.sqrt(2 / 3)


def test_one_culprit_that_recovers_everything_is_the_clean_set():
    """The motivating case's shape: reverting culprit 0 alone recovers +0.10 (log), as much as
    both; culprit 1 alone +0.03. The clean set is culprit 0 alone; culprit 1 alone falls short."""
    values = {HEAD: HEAD_VALUES, (0,): arm(0.09, 0.10, 0.11), (1,): arm(0.02, 0.03, 0.04), (0, 1): arm(0.09, 0.10, 0.11)}
    found = clean_sets(contrasts(values), values, (0, 1), 0.02)
    assert [(c.culprits, c.short) for c in found] == [((0,), ())]
    assert found[0].recovery.log == pytest.approx(0.10)
    assert 0 + HALF_2_3 < math.log(1.02)  # why culprit 0's shortfall (0 exactly) counts as recovering


def test_neither_alone_recovers_so_the_pair_is_the_clean_set():
    """Each alone +0.03, both +0.15 (they interact by +0.09): only the pair recovers."""
    values = {HEAD: HEAD_VALUES, (0,): arm(0.02, 0.03, 0.04), (1,): arm(0.02, 0.03, 0.04), (0, 1): arm(0.14, 0.15, 0.16)}
    found = clean_sets(contrasts(values), values, (0, 1), 0.02)
    assert [(c.culprits, c.short) for c in found] == [((0, 1), ((0,), (1,)))]
    assert found[0].recovery.log == pytest.approx(0.15)
    lower = {v: [1 / x for x in xs] for v, xs in values.items()}  # a lower-is-better value: the same sets
    lower_sets = clean_sets(contrasts(lower), lower, (0, 1), 0.02)
    assert [(c.culprits, c.short) for c in lower_sets] == [((0, 1), ((0,), (1,)))]


def test_a_set_neither_recovering_nor_short_leaves_no_clean_set():
    """Culprit 0 alone +0.09 against +0.10 for both: a shortfall of 0.01 with a half-width of
    0.0188 is neither under the minimum effect nor clear of 0. No set is named."""
    values = {HEAD: HEAD_VALUES, (0,): arm(0.08, 0.09, 0.10), (1,): arm(0.02, 0.03, 0.04), (0, 1): arm(0.09, 0.10, 0.11)}
    assert clean_sets(contrasts(values), values, (0, 1), 0.02) == []
    nothing_lost = {HEAD: HEAD_VALUES, (0,): HEAD_VALUES, (1,): HEAD_VALUES, (0, 1): HEAD_VALUES}
    assert clean_sets(contrasts(nothing_lost), nothing_lost, (0, 1), 0.02) == []


def test_three_culprits_can_have_two_clean_sets():
    """All three +0.30; culprit 2 alone recovers it, and so does the pair {0, 1}, though neither
    0 nor 1 alone (+0.05) does; {0, 2} and {1, 2} contain 2 and are not minimal."""
    full, part = arm(0.29, 0.30, 0.31), arm(0.04, 0.05, 0.06)
    values = {HEAD: HEAD_VALUES, (0,): part, (1,): part, (2,): full, (0, 1): full, (0, 2): full, (1, 2): full,
              (0, 1, 2): full}
    found = clean_sets(contrasts(values), values, (0, 1, 2), 0.02)
    assert found[0].recovery.df == 16
    assert [(c.culprits, c.short) for c in found] == [((2,), ()), ((0, 1), ((0,), (1,)))]


def test_the_interaction_sentence_names_the_clean_sets():
    from perfbisect.service.attribution.report import words

    cfg = AttributionConfig(min_effect=0.02)
    pair = attribute_case("c", (0, 1), unpaired({HEAD: HEAD_VALUES, (0,): arm(0.02, 0.03, 0.04),
                                                 (1,): arm(0.02, 0.03, 0.04), (0, 1): arm(0.14, 0.15, 0.16)}), cfg)
    assert pair.verdict == "interact" and [c.culprits for c in pair.clean] == [(0, 1)]
    assert words(pair, ["#930", "#950"], {}).endswith(
        "Reverting {#930, #950} together recovers 16.2%; neither alone does.")
    single = attribute_case("c", (0, 1), unpaired({HEAD: HEAD_VALUES, (0,): arm(0.09, 0.10, 0.11),
                                          (1,): arm(0.03, 0.04, 0.05), (0, 1): arm(0.09, 0.10, 0.11)}), cfg)
    assert single.verdict == "interact"  # -0.04, interval [-0.067, -0.013], p = 0.0085 below alpha 0.01
    assert words(single, ["#950", "#930"], {}).endswith(
        "Reverting #950 alone recovers as much as both (10.5% of 10.5%); #930 alone does not.")
    additive = attribute_case("c", (0, 1), unpaired({v: x * 2 for v, x in {
        HEAD: HEAD_VALUES, (0,): A, (1,): B, (0, 1): arm(0.29, 0.30, 0.31)}.items()}), cfg)
    assert additive.verdict == "additive" and additive.clean == ()  # each alone recovers its own share


def test_plan_round_goes_on_while_the_clean_sets_are_unresolved():
    """They interact (-0.04, interval [-0.067, -0.013]); culprit 1 alone falls short, but culprit
    0 alone (+0.09 against +0.10 for both) is neither clearly short nor clearly recovering: two
    more trials to every arm."""
    values = {HEAD: {"c": HEAD_VALUES}, (0,): {"c": arm(0.08, 0.09, 0.10)}, (1,): {"c": arm(0.04, 0.05, 0.06)},
              (0, 1): {"c": arm(0.09, 0.10, 0.11)}}
    result = attribute_case("c", (0, 1), unpaired({v: x["c"] for v, x in values.items()}),
                            AttributionConfig(min_effect=0.02))
    assert result.verdict == "interact" and result.clean == ()
    plan = plan_round({"c": (0, 1)}, [(0,), (1,), (0, 1)], {v: observed(x) for v, x in values.items()},
                      {v: 3 for v in values}, set(), AttributionConfig(min_effect=0.02))
    assert not plan.done and plan.requests == {HEAD: 2, (0,): 2, (1,): 2, (0, 1): 2}
