"""Attribution estimates on side-by-side blocks (issues 23 and 25): each variant's recovery is the
mean of its within-block differences against the bad end of its own blocks, the interaction
combines those paired recoveries (the variance of the sum of independent estimates), and a
variant without a complete block falls back to the pooled estimate, saying so. Literal values:
every log below is a round number, every block holds `head v v head` (two trials of each arm),
and inside a block each arm's two logs sit at -0.01 and +0.01 around its level."""

import math

import pytest

from perfbisect.service.bisect.attribution import (HEAD, AttributionConfig, attribute_case, case_contrasts, observed,
                                                   plan_round)

T_975_10 = 2.228138851986274  # Student's t, 97.5% quantile, 10 degrees of freedom
T_975_14 = 2.144786687917804
T_975_15 = 2.131449545559776
DRIFT = math.log(0.80)  # a block where the machine runs at 0.80 (target only: the control does not cancel it)


def blocks(measured):
    """Arms from {block: (variant, head level, variant level)} (log levels): the head's two trials
    and the variant's two trials of every block, each at level -0.01 and +0.01."""
    values, ids = {}, {}
    for block, (variant, head, level) in measured.items():
        for arm, at in ((HEAD, head), (variant, level)):
            if at is not None:
                values.setdefault(arm, []).extend(math.exp(at + e) for e in (-0.01, 0.01))
                ids.setdefault(arm, []).extend([block, block])
    return {arm: observed({"c": values[arm]}, {"c": ids[arm]}) for arm in values}


def unblocked(arms):
    """The same trials as if measured without blocks: how main estimated them (pooled)."""
    return {arm: observed({"c": list(o.values["c"])}) for arm, o in arms.items()}


# Culprit 0 alone recovers +0.10, culprit 1 alone +0.20, both +0.25 (they interact by -0.05).
# Culprit 0 is measured in a quiet block and a block at 0.80 (bad end and variant alike), culprit
# 1 in two blocks at 0.80, both together in two quiet blocks whose differences are 0.24 and 0.26.
DRIFTING = {1: ((0,), 0.0, 0.10), 2: ((0,), DRIFT, DRIFT + 0.10),
            3: ((1,), DRIFT, DRIFT + 0.20), 4: ((1,), DRIFT, DRIFT + 0.20),
            5: ((0, 1), 0.0, 0.24), 6: ((0, 1), 0.0, 0.26)}
# The block model's residual: 12 arm-blocks of two logs at +-0.01 (0.0002 each, 12 degrees of
# freedom) plus the spread of both-together's differences around 0.25 (0.0002, 1), and culprit
# 0's and 1's (0, 1 each): 0.0026 over 15 degrees of freedom. Two blocks of weight 1/(1/2 + 1/2)
# = 1 each: a paired recovery's variance is residual^2 / 2.
PAIRED_VAR = 0.0026 / 15 / 2


def test_drift_between_blocks_shifts_and_widens_pooled_recoveries_not_paired_ones():
    arms = blocks(DRIFTING)
    paired = attribute_case("c", (0, 1), arms, AttributionConfig(min_effect=0.02))
    half = T_975_15 * math.sqrt(PAIRED_VAR)
    for variant, log in (((0,), 0.10), ((1,), 0.20), ((0, 1), 0.25)):
        r = paired.recoveries[variant]
        assert r.paired and r.df == 15 and paired.blocks(variant) == 2
        assert r.log == pytest.approx(log) and r.se == pytest.approx(math.sqrt(PAIRED_VAR))
        assert r.ci == pytest.approx((math.expm1(log - half), math.expm1(log + half)))  # +-2.0% wide
    # Pooled over every trial (main), the bad end's mean holds blocks at 1.00 and at 0.80 in the
    # proportions of all the variants (log DRIFT / 2), not those of each variant's own blocks:
    # culprit 1 is credited with +0.20 + DRIFT / 2 = +0.088, both with +0.25 - DRIFT / 2 = +0.362,
    # and the drift's spread widens every interval: the pooled noise takes in the bad end's 12
    # logs half at 0, half at DRIFT (12 (DRIFT/2)^2), culprit 0's 4 likewise (4 (DRIFT/2)^2), and
    # the +-0.01 (0.0028 in all) over 20 degrees of freedom: culprit 1's se is six times the paired.
    pooled = attribute_case("c", (0, 1), unblocked(arms), AttributionConfig(min_effect=0.02))
    assert not pooled.recoveries[(1,)].paired
    assert pooled.recoveries[(0,)].log == pytest.approx(0.10)
    assert pooled.recoveries[(1,)].log == pytest.approx(0.20 + DRIFT / 2)
    assert pooled.recoveries[(0, 1)].log == pytest.approx(0.25 - DRIFT / 2)
    s2 = (4 * DRIFT ** 2 + 0.0028) / 20
    assert pooled.recoveries[(1,)].se == pytest.approx(math.sqrt(s2 * (1 / 4 + 1 / 12)))
    assert pooled.recoveries[(1,)].se > 6 * math.sqrt(PAIRED_VAR)


def test_the_paired_interaction_is_all_together_minus_the_singles_with_the_summed_variance():
    """-0.05 with variance 3 * residual^2 / 2 = 0.00026 (the three variants' blocks share no
    trial): they interact. Pooled, the drift turns it into +0.173 (-0.05 - DRIFT): the wrong sign."""
    arms = blocks(DRIFTING)
    result = attribute_case("c", (0, 1), arms, AttributionConfig(min_effect=0.02))
    term = result.interaction
    half = T_975_15 * math.sqrt(0.00026)
    assert term.paired and term.df == 15
    assert term.log == pytest.approx(-0.05)
    assert term.se == pytest.approx(math.sqrt(0.00026))
    assert term.se ** 2 == pytest.approx(sum(result.recoveries[v].se ** 2 for v in ((0,), (1,), (0, 1))))
    assert term.ci == pytest.approx((math.expm1(-0.05 - half), math.expm1(-0.05 + half)))
    assert result.verdict == "interact"
    # culprit 1 without culprit 0: both against 0 alone, 0.25 - 0.10, its variance the sum of two
    without = result.contrasts.of({(0, 1): 1.0, (0,): -1.0})
    assert without.log == pytest.approx(0.15) and without.se == pytest.approx(math.sqrt(2 * PAIRED_VAR))
    pooled = attribute_case("c", (0, 1), unblocked(arms), AttributionConfig(min_effect=0.02))
    assert pooled.interaction.log == pytest.approx(-0.05 - DRIFT)
    assert pooled.verdict != "interact"


def test_a_variant_without_a_complete_block_falls_back_to_the_pooled_estimate():
    """Culprit 1's only block lost its bad-end trials (block 3: the variant alone): its recovery,
    and the interaction that needs it, are pooled over every trial and say so; culprit 0's and
    both-together's are still paired. Pooled noise: the head's 8 logs at +-0.01 around 0 (0.0008,
    7 degrees of freedom), 0's 4 (0.0004, 3), 1's 2 (0.0002, 1), both's 4 (0.0004, 3): 0.0018
    over 14. Pooled interaction: -0.05 with s^2 (1/4 + 1/2 + 1/4 + (2-1)^2 / 8)."""
    arms = blocks({1: ((0,), 0.0, 0.10), 2: ((0,), 0.0, 0.10), 3: ((1,), None, 0.20),
                   4: ((0, 1), 0.0, 0.25), 5: ((0, 1), 0.0, 0.25)})
    result = attribute_case("c", (0, 1), arms, AttributionConfig(min_effect=0.02))
    s2 = 0.0018 / 14
    one = result.recoveries[(1,)]
    assert not one.paired and result.blocks((1,)) == 0 and one.df == 14
    assert one.log == pytest.approx(0.20) and one.se == pytest.approx(math.sqrt(s2 * (1 / 2 + 1 / 8)))
    zero = result.recoveries[(0,)]  # residual: 8 arm-blocks (0.0016, 8) and two exact pairs (0, 2)
    assert zero.paired and zero.df == 10 and zero.se == pytest.approx(math.sqrt(0.0016 / 10 / 2))
    term = result.interaction
    half = T_975_14 * math.sqrt(s2 * 1.125)
    assert not term.paired and term.df == 14
    assert term.log == pytest.approx(-0.05) and term.se == pytest.approx(math.sqrt(s2 * 1.125))
    assert term.ci == pytest.approx((math.expm1(-0.05 - half), math.expm1(-0.05 + half)))


def test_trials_outside_blocks_are_pooled_as_before_blocks_existed():
    """A job from before blocks: the bad end's and the variant's 4 logs each at +-0.01 around
    their level give s^2 = 0.0008 / 6, and the recovery's se is s sqrt(1/4 + 1/4)."""
    contrasts = case_contrasts("c", unblocked(blocks({1: ((0,), 0.0, 0.10), 2: ((0,), 0.0, 0.10)})))
    assert contrasts.steps == {}
    recovery = contrasts.recovery((0,))
    assert not recovery.paired and recovery.df == 6 and recovery.log == pytest.approx(0.10)
    assert recovery.se == pytest.approx(math.sqrt(0.0008 / 6 / 2))


def test_a_contrast_needs_weights_that_sum_to_zero():
    contrasts = case_contrasts("c", blocks({1: ((0,), 0.0, 0.10), 2: ((0,), 0.0, 0.10)}))
    with pytest.raises(ValueError):
        contrasts.of({(0,): 1.0})


def test_the_planner_judges_on_blocks_and_caps_on_the_variants_trials():
    """After the first round of blocks (two a variant) the bad end has 12 trials, each variant 4.
    The cap (12) follows the variants, so a drifting round is not the last: pooled, the drift
    leaves the interaction unresolved and every variant gets another block (2 trials; the bad end
    runs in them). On the blocks, every variant against the bad end and the interaction are
    decided: done."""
    arms = blocks(DRIFTING)
    variants = [(0,), (1,), (0, 1)]
    attempts = {HEAD: 12, **{v: 4 for v in variants}}
    config = AttributionConfig(min_effect=0.02, max_trials=12)
    assert plan_round({"c": (0, 1)}, variants, arms, attempts, set(), config).done
    pooled = plan_round({"c": (0, 1)}, variants, unblocked(arms), attempts, set(), config)
    assert not pooled.done and pooled.requests == {v: 2 for v in variants}


def test_the_report_says_which_estimates_are_paired():
    """The report's rows carry `paired` and the blocks; each case's line says the estimates are
    paired, pooled, or which fell back (the fallback arms above: #908 alone has no complete block)."""
    from perfbisect.service.attribution.report import build
    from perfbisect.service.job_spec import load
    from perfbisect.service.attribution.schemas import AttributionRead
    from perfbisect.service.reports.attribution import basis

    spec = load({"culprits": [{"label": "#905", "first_sha": "a", "last_sha": "a"},
                              {"label": "#908", "first_sha": "b", "last_sha": "b"}],
                 "variants": ["0", "1", "0+1"], "case_culprits": {"c": [0, 1]}}, "attribute")

    def read(arms):
        report = build(spec, arms, arms, {}, {"c": ("GB/s", True)}, AttributionConfig(min_effect=0.02))
        attribution = AttributionRead(job_id=1, status="succeeded", **report)
        return attribution, attribution.cases[0]

    attribution, case = read(blocks(DRIFTING))
    assert [(r.variant, r.paired, r.blocks) for r in case.recoveries] == [("0", True, 2), ("1", True, 2),
                                                                          ("0+1", True, 2)]
    assert case.interaction.paired and case.interaction_metric.paired
    assert basis(attribution, case) == ("paired: each variant against the bad end of its own side-by-side blocks "
                                        "(2 a variant)")
    attribution, case = read(blocks({1: ((0,), 0.0, 0.10), 2: ((0,), 0.0, 0.10), 3: ((1,), None, 0.20),
                                      4: ((0, 1), 0.0, 0.25), 5: ((0, 1), 0.0, 0.25)}))
    assert [(r.variant, r.paired, r.blocks) for r in case.recoveries] == [("0", True, 2), ("1", False, 0),
                                                                          ("0+1", True, 2)]
    assert basis(attribution, case) == ("paired on side-by-side blocks, except #908 reverted and the interaction: "
                                        "pooled over every trial (no complete block)")
    attribution, case = read(unblocked(blocks(DRIFTING)))
    assert basis(attribution, case) == ("pooled over every trial of each arm: no variant has a complete "
                                        "side-by-side block")
