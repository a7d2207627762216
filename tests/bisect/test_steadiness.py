"""An unsteady machine says so early and waits (issue 23): literal control series, exact pauses."""

from __future__ import annotations

import math
import statistics

import pytest

from perfbisect.service.bisect import BisectConfig
from perfbisect.service.bisect.steadiness import Wait, check_steadiness, control_spread, report, set_aside, too_unsteady

CONFIG = BisectConfig(min_effect=0.02)  # noise_floor 2: a control spread above log(1.02)/2 = 0.99% is too much
STEADY = [{"gemm": 1.000}, {"gemm": 1.005}, {"gemm": 0.995}, {"gemm": 1.002}]
UNSTEADY = [{"gemm": 1.00}, {"gemm": 1.10}, {"gemm": 0.95}, {"gemm": 1.05}]


def log_sd(values):
    return statistics.stdev(math.log(v) for v in values)


def test_too_unsteady_is_the_minimum_effects_bound_on_the_control_spread():
    bound = math.log1p(0.02) / 2
    assert not too_unsteady(bound * 0.99, CONFIG)
    assert too_unsteady(bound * 1.01, CONFIG)
    assert not too_unsteady(None, CONFIG)


def test_control_spread_is_the_worst_cases_sd_of_logs():
    trials = [{"gemm": 1.00, "attn": 2.0}, {"gemm": 1.10, "attn": 2.0}, {"gemm": 0.95}]
    assert control_spread(trials) == ("gemm", pytest.approx(log_sd([1.00, 1.10, 0.95])))
    assert control_spread([{"gemm": 1.0}]) is None


def test_a_steady_control_goes_on():
    assert check_steadiness(STEADY, CONFIG, []) is None


def test_an_unsteady_control_pauses_60_120_240_s_then_gives_up_once():
    first = check_steadiness(UNSTEADY, CONFIG, [])
    assert first == Wait(60, 4, pytest.approx(log_sd([1.00, 1.10, 0.95, 1.05])), "gemm")
    waits = [first]
    assert check_steadiness(UNSTEADY + UNSTEADY[:2], CONFIG, waits) is None  # 2 trials since the pause: too few
    assert check_steadiness(UNSTEADY + STEADY, CONFIG, waits) is None  # steady again after the pause
    trials = UNSTEADY * 2
    second = check_steadiness(trials, CONFIG, waits)
    assert (second.pause_s, second.trials) == (120, 8)
    third = check_steadiness(UNSTEADY * 3, CONFIG, [first, second])
    assert (third.pause_s, third.trials) == (240, 12)
    gave_up = check_steadiness(UNSTEADY * 4, CONFIG, [first, second, third])
    assert (gave_up.pause_s, gave_up.trials) == (0, 16)
    assert check_steadiness(UNSTEADY * 5, CONFIG, [first, second, third, gave_up]) is None


def test_only_the_latest_trials_count():
    # an unsteady start, then eight steady trials: the window holds the steady ones only
    assert check_steadiness(UNSTEADY + STEADY * 2, CONFIG, []) is None


def test_the_report_says_how_long_it_waited_and_why():
    assert report([], CONFIG) is None
    waits = [Wait(60, 4, 0.05, "gemm"), Wait(120, 8, 0.08, "gemm")]
    assert report(waits, CONFIG) == (
        "waited 180 s in 2 pauses for a steadier machine: the control's own spread on gemm reached 8.3% over "
        "the last trials, above the 1.0% that a 2.0% minimum effect allows")
    gave_up = waits + [Wait(240, 12, 0.06, "gemm"), Wait(0, 16, 0.07, "gemm")]
    assert report(gave_up, CONFIG).startswith("waited 420 s in 3 pauses")
    assert report(gave_up, CONFIG).endswith("it stayed unsteady, so the job measured on (its verdicts carry that noise)")


def test_the_first_pause_sets_the_others_and_zero_never_pauses():
    assert check_steadiness(UNSTEADY, CONFIG, [], first_pause_s=5).pause_s == 5
    assert check_steadiness(UNSTEADY * 2, CONFIG, [Wait(5, 4, 0.06, "gemm")], first_pause_s=5).pause_s == 10
    assert check_steadiness(UNSTEADY, CONFIG, [], first_pause_s=0) is None


def test_the_trials_that_made_it_pause_are_set_aside_once_it_is_steady_again():
    waits = [Wait(60, 4, 0.06, "gemm"), Wait(120, 10, 0.07, "gemm")]
    unsteady = UNSTEADY * 2 + UNSTEADY[:2]  # the pauses were decided at 4 and at 10 finished trials
    # each pause's window: the trials it judged (at most LAST_TRIALS = 8 since the pause before)
    assert set_aside(unsteady + STEADY, CONFIG, waits) == frozenset(range(10))
    assert set_aside(UNSTEADY * 3 + UNSTEADY * 2 + STEADY, CONFIG, [Wait(60, 20, 0.06, "gemm")]) == frozenset(range(12, 20))


def test_nothing_is_set_aside_while_it_pauses_after_it_gave_up_or_if_it_never_paused():
    waits = [Wait(60, 4, 0.06, "gemm")]
    assert set_aside(UNSTEADY + STEADY, CONFIG, []) == frozenset()  # never paused
    assert set_aside(UNSTEADY + UNSTEADY, CONFIG, waits) == frozenset()  # still unsteady
    assert set_aside(UNSTEADY + STEADY[:2], CONFIG, waits) == frozenset()  # too few trials since the pause
    gave_up = [Wait(60, 4, 0.06, "gemm"), Wait(0, 8, 0.07, "gemm")]
    assert set_aside(UNSTEADY * 2 + STEADY, CONFIG, gave_up) == frozenset()  # it measured on with every trial


def test_the_report_says_what_was_set_aside():
    waits = [Wait(60, 4, 0.05, "gemm")]
    assert report(waits, CONFIG, set_aside=4).endswith(
        "; steady again after that, so the 4 trials measured while it was not were set aside and their "
        "revisions measured again")
    assert "set aside" not in report(waits, CONFIG)
