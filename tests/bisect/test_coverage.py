"""What an unchanged range covers (issue 46): the widest unmeasured stretch, `--scan auto`'s
points, and the planner finding a step and its undo six commits apart that `--scan 4` misses
and says it could miss."""

import pytest

from perfbisect.service.bisect import BisectConfig
from perfbisect.service.bisect.coverage import (
    DEFAULT_MAX_GAP, Gap, auto_scan_points, gap_note, history_edges, points_within, refine_points, widest_gap,
)
from perfbisect.service.bisect.history import CaseModel, History
from perfbisect.service.bisect.outcomes import Outcome, decide
from perfbisect.service.bisect.probes import scan_points
from perfbisect.service.bisect.simulate import run

N = 69  # the issue's range: good and the 68 first-parent commits after it


def stretches(n: int, points: list[int]) -> list[int]:
    edges = [0, *points, n - 1]
    return [b - a for a, b in zip(edges, edges[1:])]


def test_the_widest_gap_is_the_longest_stretch_between_measured_revisions() -> None:
    assert widest_gap(10, [0, 9]) == Gap(0, 9) and Gap(0, 9).unseen == 8 and Gap(0, 9).commits == 9
    assert widest_gap(10, [9, 0, 4]) == Gap(4, 9)
    assert widest_gap(9, [0, 4, 8]) == Gap(0, 4)  # a tie: the earliest
    assert widest_gap(4, [0, 1, 2, 3]) is None and widest_gap(4, [2]) is None
    with pytest.raises(ValueError):
        widest_gap(4, [0, 4])


def test_scan_4_on_the_issues_range_leaves_14_commits_unseen() -> None:
    points = scan_points(N, 4)
    assert points == [14, 27, 41, 54]
    gap = widest_gap(N, [0, *points, N - 1])
    assert gap == Gap(0, 14) and gap.commits == 14
    assert gap_note(gap, N).startswith("a step undone within 14 consecutive commits would not be seen")
    assert "only the ends were measured: a step undone within the 68 commits" in gap_note(Gap(0, 68), N)


def test_scan_auto_cuts_the_range_into_stretches_of_at_most_max_gap() -> None:
    assert DEFAULT_MAX_GAP <= 8  # the issue: a 68-commit range in stretches of at most 8
    points = auto_scan_points(N, DEFAULT_MAX_GAP)
    assert len(points) == 11 and max(stretches(N, points)) == DEFAULT_MAX_GAP == 6
    assert max(stretches(N, auto_scan_points(N, 8))) == 8 and len(auto_scan_points(N, 8)) == 8
    assert points_within(10, 13, 3) == [] and points_within(10, 14, 3) == [12] and auto_scan_points(2, 1) == []
    for n in range(2, 80):
        for max_gap in range(1, 12):
            assert max(stretches(n, auto_scan_points(n, max_gap))) <= max_gap
    with pytest.raises(ValueError):
        points_within(0, 10, 0)


def test_refinement_cuts_the_alike_pairs_beside_a_step_finer() -> None:
    # 17 and 18 differ: the alike pairs that touch them get points every 3 commits; (40, 46) not
    alike, different = [(11, 17), (18, 23), (40, 46)], [(17, 18)]
    assert refine_points(alike, different, 6, measured={11, 17, 18, 23, 40, 46}) == [14, 20]
    assert refine_points(alike, [], 6, measured=set()) == []
    assert refine_points([(0, 6)], [(6, 7)], 6, measured={0, 3, 6, 7}) == []  # already tried


def test_a_tracked_history_puts_scan_points_where_it_moved() -> None:
    # measured every commit around a 2-commit excursion (6, 7 slow), then sparsely; noise under 15%
    history = {0: 1.0, 4: 1.02, 5: 0.99, 6: 0.55, 7: 0.56, 8: 1.0, 12: 1.1, 16: 0.97}
    assert history_edges(history, 0.15) == [6, 8]
    assert history_edges({0: 1.0, 9: 1.0}, 0.15) == [] and history_edges({}, 0.15) == []
    assert auto_scan_points(17, 8) == [8]  # the even grid alone: 6 and 7 fall between 0 and 8
    assert auto_scan_points(17, 8, hints=[6, 8]) == [6, 8]  # 0..6 and 8..16 are within 8 commits already
    assert auto_scan_points(17, 8, hints=[2]) == [2, 9]  # 2..16 is not: cut in two
    assert auto_scan_points(17, 8, hints=[0, 16, 40]) == [8]  # the ends and outside points add nothing
    history = History(n_revisions=17, cases={"k": CaseModel(cv=0.01, levels=((0, 1.0), (6, 0.55), (8, 1.0)))})
    blind, _, _ = run(history, BisectConfig(min_effect=0.15, max_gap=8), seed=1)
    hinted, _, _ = run(history, BisectConfig(min_effect=0.15, max_gap=8, hints=(6, 8)), seed=1)
    assert blind.culprits == () and sorted(c.first for c in hinted.culprits) == [6, 8]


def excursion(first_slow: int, undone_at: int, slow: float = 0.55) -> History:
    """One case 82% slower (a ratio 0.55x of before) from `first_slow` until the undo at `undone_at`."""
    return History(n_revisions=N, cases={"k": CaseModel(cv=0.01, levels=((0, 1.0), (first_slow, slow),
                                                                         (undone_at, 1.0)))})


CONFIG = BisectConfig(min_effect=0.15)


@pytest.mark.parametrize("first_slow", range(1, N - 6))
def test_scan_auto_finds_a_step_undone_six_commits_later_wherever_it_sits(first_slow: int) -> None:
    plan, _, _ = run(excursion(first_slow, first_slow + 6), CONFIG.__class__(min_effect=0.15, max_gap=6), seed=1)
    assert sorted((c.first, c.last) for c in plan.culprits) == [(first_slow, first_slow),
                                                                 (first_slow + 6, first_slow + 6)]


def test_scan_4_misses_it_between_its_points_and_says_so() -> None:
    history = excursion(56, 62)  # between the scan points 54 and 68
    plan, bench, _ = run(history, BisectConfig(min_effect=0.15, scan=4), seed=1)
    assert plan.culprits == ()
    outcome = decide(N, bench.observations(), plan, BisectConfig(min_effect=0.15, scan=4), ["k"])
    [case] = outcome.cases
    assert case.outcome == Outcome.unchanged and case.gap == (0, 14) and case.unseen == 13
    assert "a step undone within 14 consecutive commits would not be seen" in case.reason
    assert outcome.gap == (0, 14)

    auto = BisectConfig(min_effect=0.15, max_gap=6)
    found, bench, _ = run(history, auto, seed=1)
    assert sorted((c.first, c.last) for c in found.culprits) == [(56, 56), (62, 62)]
    [case] = decide(N, bench.observations(), found, auto, ["k"]).cases
    assert case.outcome == Outcome.regressed and case.gap is None


def test_scan_auto_refines_beside_an_excursion_and_finds_a_second_one_next_to_it() -> None:
    """A 6-commit grid (points ..., 11, 17, 23, 28, ...): 12..17 slow (17 sees it), and 25..26
    slow, a two-commit excursion inside the alike pair 23..28 beside it. A fixed scan at the
    same points finds the first one only; `--scan auto` cuts the alike pairs beside the step it
    saw to 3 commits (a point at 26) and names all four edges."""
    history = History(n_revisions=N, cases={"k": CaseModel(cv=0.01, levels=(
        (0, 1.0), (12, 0.55), (18, 1.0), (25, 0.55), (27, 1.0)))})
    assert auto_scan_points(N, 6) == scan_points(N, 11) and {11, 17, 23, 28} <= set(scan_points(N, 11))
    fixed, _, _ = run(history, BisectConfig(min_effect=0.15, scan=11), seed=1)
    assert sorted(c.first for c in fixed.culprits) == [12, 18]
    auto, _, _ = run(history, BisectConfig(min_effect=0.15, max_gap=6), seed=1)
    assert sorted(c.first for c in auto.culprits) == [12, 18, 25, 27]
