"""The pure loop logic on literal data: change points -> steps between measured heads, steps of
several cases grouped by range, matched with stored alerts (a triaged one is not raised again),
and an alert fixed by a later step that restores its level."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pytest

from perfbisect.service.alerts.grouping import (
    ALERT,
    IMPROVEMENT,
    REFUTED,
    REMEASURE,
    WAIT,
    REGRESSION,
    WRONG_FIXED,
    WRONG_RESULTS,
    CaseHistory,
    KnownAlert,
    Remeasure,
    Step,
    StepGroup,
    confirmation,
    correctness_steps,
    detect_steps,
    group_steps,
    overlap,
    perf_steps,
    reconcile,
    restoring_step,
    side_by_side_agrees,
)
from perfbisect.service.alerts.service import step_detector
from perfbisect.service.bisect.changepoints import compute_change_points


@dataclass(frozen=True)
class CP:
    index: int
    mean_before: float
    mean_after: float
    pvalue: float = 1e-6


def fixed_detector(*points: CP):
    return lambda values: list(points)


def test_change_points_become_steps_between_measured_heads() -> None:
    history = CaseHistory("gemm", positions=(0, 4, 8, 12, 16, 20), values=(1.0, 1.0, 1.0, 0.5, 0.5, 0.5))
    [step] = perf_steps(history, fixed_detector(CP(3, 1.0, 0.5)))
    assert (step.kind, step.before, step.after, step.rel) == (REGRESSION, 8, 12, -0.5)
    lower_is_better = CaseHistory("ms", (0, 1), (1.0, 0.5), higher_is_better=False)
    assert perf_steps(lower_is_better, fixed_detector(CP(1, 1.0, 0.5)))[0].kind == IMPROVEMENT


def test_the_real_detector_finds_a_planted_step_on_a_literal_history() -> None:
    values = (1.00, 1.01, 0.99, 1.00, 1.02, 0.71, 0.70, 0.72, 0.69, 0.70)
    history = CaseHistory("gemm", positions=tuple(range(0, 40, 4)), values=values)
    steps = perf_steps(history, lambda v: compute_change_points(v, min_magnitude=0.1))
    assert [(s.kind, s.before, s.after) for s in steps] == [(REGRESSION, 16, 20)]


def test_wrong_results_switches_are_steps_without_statistics() -> None:
    history = CaseHistory("gemm K=520", positions=(0, 4, 16), values=(1, 1, 1), wrong=(8, 12))
    steps = correctness_steps(history)
    assert [(s.kind, s.before, s.after) for s in steps] == [(WRONG_RESULTS, 4, 8), (WRONG_FIXED, 12, 16)]


def test_cases_that_moved_in_overlapping_ranges_form_one_alert_narrowed_to_the_common_range() -> None:
    steps = [Step("a", REGRESSION, 4, 12, -0.3), Step("b", REGRESSION, 8, 12, -0.2),
             Step("c", IMPROVEMENT, 20, 24, 0.1), Step("d", WRONG_FIXED, 8, 12)]
    first, second = group_steps(steps)
    assert (first.before, first.after, [s.case for s in first.steps]) == (8, 12, ["a", "b"])
    assert first.kind == REGRESSION and abs(first.magnitude - 0.3) < 1e-12
    assert (second.before, second.after, second.kind) == (20, 24, IMPROVEMENT)


def test_a_group_holding_wrong_results_is_a_wrong_results_alert_and_comes_first() -> None:
    [group] = group_steps([Step("a", IMPROVEMENT, 0, 4, 0.5), Step("b", WRONG_RESULTS, 0, 4)])
    assert group.kind == WRONG_RESULTS and group.magnitude == 1.0


def test_two_steps_of_one_case_in_one_range_are_not_merged() -> None:
    assert len(group_steps([Step("a", REGRESSION, 0, 8, -0.2), Step("a", IMPROVEMENT, 4, 8, 0.3)])) == 2


def test_overlap() -> None:
    assert overlap((4, 12), (8, 16)) == (8, 12)
    assert overlap((4, 8), (8, 12)) is None  # (4, 8] and (8, 12] share no commit


def test_re_detections_update_the_same_alert_and_triaged_ones_are_not_raised_again() -> None:
    groups = group_steps([Step("a", REGRESSION, 6, 7, -0.3), Step("a", IMPROVEMENT, 20, 24, 0.2),
                          Step("b", REGRESSION, 40, 44, -0.1)])
    known = [KnownAlert(1, "new", REGRESSION, (4, 8)), KnownAlert(2, "acknowledged", IMPROVEMENT, (20, 24)),
             KnownAlert(3, "invalid", REGRESSION, None)]
    matches = reconcile(groups, known)
    assert [(m.alert_id, m.raised) for m in matches] == [(1, True), (2, False), (None, True)]


def test_each_stored_alert_matches_at_most_one_group() -> None:
    groups = group_steps([Step("a", REGRESSION, 4, 6, -0.3), Step("b", REGRESSION, 6, 8, -0.2)])
    matches = reconcile(groups, [KnownAlert(1, "new", REGRESSION, (4, 8))])
    assert [m.alert_id for m in matches] == [1, None]


def test_a_regression_is_fixed_when_every_case_it_moved_is_back() -> None:
    alert = KnownAlert(1, "new", REGRESSION, (20, 24), {"a": 0.085, "b": 0.5})
    later = [Step("a", IMPROVEMENT, 40, 44, 0.8, mean_before=0.058, mean_after=0.107),
             Step("b", IMPROVEMENT, 28, 32, 0.2, mean_before=0.4, mean_after=0.48)]
    assert restoring_step(alert, later, {}, tolerance=0.05).after == 44
    partly = [later[0], Step("b", IMPROVEMENT, 28, 32, 0.1, mean_before=0.4, mean_after=0.44)]
    assert restoring_step(alert, partly, {}, tolerance=0.05) is None
    earlier = [Step("a", IMPROVEMENT, 0, 4, 1.0, mean_before=0.05, mean_after=0.1), later[1]]
    assert restoring_step(alert, earlier, {}, tolerance=0.05) is None  # a step before the alert fixes nothing


def test_only_open_alerts_are_fixed_and_wrong_results_need_passing_again() -> None:
    fixed_later = [Step("a", WRONG_FIXED, 12, 16)]
    assert restoring_step(KnownAlert(1, "new", WRONG_RESULTS, (4, 8), {"a": None}), fixed_later, {}, 0.05).after == 16
    assert restoring_step(KnownAlert(1, "expected", WRONG_RESULTS, (4, 8), {"a": None}), fixed_later, {}, 0.05) is None
    lower = KnownAlert(2, "new", REGRESSION, (4, 8), {"ms": 1.0})
    back = [Step("ms", IMPROVEMENT, 8, 12, -0.3, mean_before=1.4, mean_after=1.02)]
    assert restoring_step(lower, back, {"ms": False}, tolerance=0.05).after == 12


def test_detect_steps_orders_every_case_by_range() -> None:
    histories = [CaseHistory("b", (0, 4, 8), (1, 1, 1), wrong=(12,)),
                 CaseHistory("a", (0, 4, 8, 12), (1, 1, 2, 2))]
    steps = detect_steps(histories, lambda v: [CP(2, 1.0, 2.0)] if len(v) == 4 else [])
    assert [(s.case, s.kind, s.after) for s in steps] == [("a", IMPROVEMENT, 8), ("b", WRONG_RESULTS, 12)]


DROP = Step("gemm", REGRESSION, 5, 9, -0.4, 0.004, 0.5, 0.3)


def test_a_side_by_side_re_measure_agrees_when_it_moves_the_way_the_step_does() -> None:
    """Half the minimum magnitude (15%) in the step's direction, medians of the two heads."""
    assert side_by_side_agrees(DROP, [0.50, 0.52, 0.49], [0.30, 0.31, 0.45], 0.15)
    assert side_by_side_agrees(DROP, [0.50, 0.50, 0.50], [0.46, 0.46, 0.46], 0.15)  # -8% >= 7.5%
    assert not side_by_side_agrees(DROP, [0.50, 0.50, 0.50], [0.47, 0.47, 0.47], 0.15)  # -6%: a busy spell's step
    assert not side_by_side_agrees(DROP, [0.30, 0.31], [0.50, 0.52], 0.15)  # the other way
    assert not side_by_side_agrees(DROP, [], [0.3], 0.15)  # a side that measured nothing


def test_a_new_step_is_re_measured_once_then_alerts_only_when_the_re_measure_shows_it() -> None:
    group = StepGroup(5, 9, (DROP,))
    assert confirmation(group, {}, 0.15) == REMEASURE
    assert confirmation(group, {(5, 9): Remeasure(5, 9, None)}, 0.15) == WAIT
    shown = Remeasure(5, 9, {"gemm": ([0.5, 0.51, 0.49], [0.3, 0.29, 0.33])})
    assert confirmation(group, {(5, 9): shown}, 0.15) == ALERT
    gone = Remeasure(5, 9, {"gemm": ([0.31, 0.30, 0.29], [0.3, 0.29, 0.33])})  # both heads slow at that moment
    assert confirmation(group, {(5, 9): gone}, 0.15) == REFUTED
    assert confirmation(StepGroup(3, 9, (DROP,)), {(5, 9): shown}, 0.15) == REMEASURE  # other heads: its own
    wrong = StepGroup(5, 9, (Step("gemm K=520", WRONG_RESULTS, 5, 9),))
    assert confirmation(wrong, {}, 0.15) == ALERT  # one wrong result is a failure: nothing to re-measure


# The bf16 gemm heads of two quiet `perfbisect demo --track` runs (twelfth session, runs 7 and 9):
# positions on the branch and the median ratio to the control. Planted: -55% at 10, -40% at 28
# (#930), +180% at 43 (#945). Their heads drift within a level (0.17 -> 0.16 -> 0.13 before 28).
RUN7 = ((1, 3, 5, 9, 10, 12, 13, 21, 25, 29, 33, 37, 41, 42, 43, 44, 45, 49, 53),
        (0.4918, 0.498, 0.4505, 0.4303, 0.1299, 0.1388, 0.1316, 0.1272, 0.1346, 0.1043, 0.0825, 0.1055, 0.0874,
         0.0819, 0.2408, 0.2366, 0.2447, 0.2922, 0.2915))
RUN9 = ((1, 3, 5, 9, 10, 12, 13, 21, 25, 26, 27, 28, 29, 33, 37, 41, 45, 49, 53),
        (0.4987, 0.4938, 0.4725, 0.481, 0.1735, 0.1664, 0.1681, 0.1725, 0.1689, 0.1587, 0.1293, 0.1, 0.1053, 0.1051,
         0.0864, 0.0783, 0.2272, 0.2964, 0.2924))


@pytest.mark.parametrize(("heads", "expected", "strict_found"), [(RUN7, [(9, 10), (25, 29), (42, 43)], 3),
                                                                 (RUN9, [(9, 10), (27, 28), (41, 45)], 0)])
def test_a_suspect_is_every_planted_step_of_a_quiet_tracking_demo(heads, expected, strict_found):
    """With the jump test at the alert's 0.01, in run 9 the cascade of re-tests left no step at
    all (in run 7 lines through a few drifting heads a side refused the -40% step until flat
    sides were fitted as levels, issue 46); the suspect's looser jump test finds all three in
    both (the side-by-side re-measure then decides)."""
    history = CaseHistory("gemm", *heads)
    assert [(s.before, s.after) for s in perf_steps(history, step_detector(0.15, confirm=True))] == expected
    strict = partial(compute_change_points, min_magnitude=0.15, min_size=3, pvalue=0.01, trend_pvalue=0.01,
                     relative=True)
    assert len(perf_steps(history, strict)) == strict_found
