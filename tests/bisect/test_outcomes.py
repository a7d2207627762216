"""Outcomes on literal observations, with the planner's own last plan: never "unchanged" for
what was not measured, the failed end's error kept, noise that hides the minimum effect said."""

from __future__ import annotations

import math

from perfbisect.service.bisect import BisectConfig, Observation, RevisionState, plan_next
from perfbisect.service.bisect.outcomes import CaseNoise, Failure, Outcome, decide

CASE, OTHER = "gemm M=64,N=64,K=64,dtype=fp32", "rmsnorm M=64,N=64,dtype=fp32"
CALM = [1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00]
CONFIG = BisectConfig(min_effect=0.05)


def ok(*series: list[float], cases=(CASE,)) -> Observation:
    return Observation(RevisionState.ok, dict(zip(cases, series)))


def outcome_of(observations, n=2, config=CONFIG, cases=(CASE,), failures=(), noise=None):
    plan = plan_next(n, observations, config)
    assert plan.done
    return decide(n, observations, plan, config, cases, failures, noise)


def test_same_ends_are_unchanged_with_the_bound_ruled_out() -> None:
    result = outcome_of({0: ok(CALM), 1: ok([v * 1.005 for v in CALM])})
    [case] = result.cases
    assert result.verdict == Outcome.unchanged and case.outcome == Outcome.unchanged
    assert case.bound is not None and 0 < case.bound < 0.05 and case.ci[0] < 0.005 < case.ci[1]
    assert result.warning is None and result.counts["unchanged"] == 1


def test_a_head_that_does_not_import_fails_with_its_error() -> None:
    error = "ModuleNotFoundError: No module named 'minikern.nope'"
    result = outcome_of({0: ok(CALM), 1: Observation(RevisionState.unbuildable)},
                        failures=[Failure(1, "import_error", error)])
    [case] = result.cases
    assert result.verdict == Outcome.failed and case.outcome == Outcome.failed
    assert case.reason == "import failed at the bad end" and case.error == error and case.failed_at == 1
    assert case.bound is None


def test_nothing_measured_anywhere_is_failed_never_unchanged() -> None:
    broken = Observation(RevisionState.unbuildable)
    failures = [Failure(i, "cuda_missing", "device 'cuda' requested but torch sees no CUDA device") for i in range(4)]
    result = outcome_of({i: broken for i in range(4)}, n=4, failures=failures, cases=(CASE, OTHER))
    assert [c.outcome for c in result.cases] == [Outcome.failed, Outcome.failed]
    assert result.cases[0].reason == "CUDA missing at the good end"
    assert result.counts == {"regressed": 0, "improved": 0, "unchanged": 0, "inconclusive": 0, "failed": 2}


def test_a_build_failing_at_every_revision_tried_says_to_check_the_build_command() -> None:
    broken = Observation(RevisionState.unbuildable)
    failures = [Failure(i, "build_error", "sh: 1: nvcc: not found") for i in (0, 1, 2, 17, 18, 19)]
    result = outcome_of({i: broken for i in (0, 1, 2, 17, 18, 19)}, n=20, failures=failures)
    [case] = result.cases
    assert case.outcome == Outcome.failed and case.error == "sh: 1: nvcc: not found"
    assert case.reason == ("build failed at the good end; nothing built at any of the 6 revisions tried: "
                           "check the build command")
    # a failed end beside revisions that built is only that
    beside = outcome_of({0: broken, 1: ok(CALM), 2: ok(CALM)}, n=3, failures=failures[:1])
    assert beside.cases[0].reason == "build failed at the good end"


def test_a_case_failing_alone_keeps_the_other_cases_verdicts() -> None:
    failures = [Failure(1, "wrong_results", "relative error 0.5 above tolerance 0.002", case=OTHER)]
    result = outcome_of({0: ok(CALM, CALM, cases=(CASE, OTHER)), 1: ok(CALM, cases=(CASE, OTHER))},
                        cases=(CASE, OTHER), failures=failures)
    by_case = {c.case: c for c in result.cases}
    assert by_case[CASE].outcome == Outcome.unchanged
    assert by_case[OTHER].outcome == Outcome.failed and by_case[OTHER].reason == "wrong results at the bad end"
    assert result.verdict == Outcome.failed


def test_slower_is_regressed_and_faster_is_improved() -> None:
    slower = outcome_of({0: ok(CALM), 1: ok([v * 0.7 for v in CALM])})
    assert slower.verdict == Outcome.regressed
    [step] = slower.cases[0].steps
    assert step.regression and step.effect.rel < -0.25 and (step.first, step.last) == (1, 1)
    faster = outcome_of({0: ok(CALM), 1: ok([v * 1.4 for v in CALM])})
    assert faster.verdict == Outcome.improved and not faster.cases[0].steps[0].regression
    # for a time metric (lower is better) the same rise is a regression
    timed = outcome_of({0: ok(CALM), 1: ok([v * 1.4 for v in CALM])},
                       config=BisectConfig(min_effect=0.05, higher_is_better=False))
    assert timed.verdict == Outcome.regressed


def test_too_noisy_for_the_minimum_effect_is_inconclusive_with_a_warning() -> None:
    noisy = [1.0, 1.3, 0.8, 1.1, 0.75, 1.25, 0.9, 1.2, 0.85, 1.05, 0.95, 1.15]
    result = outcome_of({0: ok(noisy), 1: ok(list(reversed(noisy)))}, config=BisectConfig(min_effect=0.02),
                        noise={CASE: CaseNoise(control=[noisy, noisy], throttled=0, samples=240)})
    [case] = result.cases
    assert case.outcome == Outcome.inconclusive and "too noisy for the minimum effect" in case.reason
    [report] = result.noise
    assert report.noisy and report.detectable > 0.3
    assert result.warning.startswith("noisy run: the smallest step it could detect is")
    assert "control's own spread" in result.warning


def test_throttled_samples_warn_even_when_the_values_are_calm() -> None:
    result = outcome_of({0: ok(CALM), 1: ok(CALM)}, noise={CASE: CaseNoise(throttled=40, samples=200)})
    assert result.verdict == Outcome.unchanged and "40 samples were dropped as throttled" in result.warning


def test_an_unsteady_control_with_a_steady_ratio_is_named_as_the_machine_not_as_noise() -> None:
    """The control spreads 10% across trials but the ratio to it holds: the run could detect the
    minimum effect, and the warning says the machine moved, not that the run was too noisy."""
    control = [[1.0, 1.12, 0.9, 1.1], [0.92, 1.08, 1.0, 1.15]]
    result = outcome_of({0: ok(CALM), 1: ok(CALM)}, config=BisectConfig(min_effect=0.15),
                        noise={CASE: CaseNoise(control=control, throttled=0, samples=200)})
    assert result.verdict == Outcome.unchanged
    [report] = result.noise
    assert report.noisy and report.detectable <= 0.15
    assert result.warning.startswith(f"unsteady machine on {CASE}, but the smallest step this run could detect "
                                     "is still 15.0% (minimum effect 15.0%)")
    assert "the control's own spread across trials is" in result.warning


def test_unfinished_search_is_inconclusive() -> None:
    observations = {0: ok(CALM), 5: ok([v * 0.7 for v in CALM])}
    plan = plan_next(6, observations, CONFIG)
    assert not plan.done
    result = decide(6, observations, plan, CONFIG, (CASE,))
    assert result.cases[0].outcome == Outcome.inconclusive and result.cases[0].reason == "the search did not finish"


def two(first: list[float], second: list[float]) -> Observation:
    return ok(first, second, cases=(CASE, OTHER))


def test_a_culprit_on_one_case_is_tightened_until_the_other_case_is_decided_there() -> None:
    # A -40% step on CASE at revision 2; OTHER, 3 and 2 trials around it, moves by about -12%
    # there: its interval straddles the 15% minimum, so the search is not done yet.
    config = BisectConfig(min_effect=0.15)
    observations = {0: two([1.0, 1.01, 0.99], [1.0, 0.96, 1.04]), 1: two([1.0, 1.0], [1.03, 0.98]),
                    2: two([0.6, 0.61, 0.6], [0.88, 0.845, 0.915])}
    plan = plan_next(3, observations, config)
    assert not plan.done and [(r.revision, r.trials) for r in plan.requests] == [(1, 2)]
    [culprit] = plan.culprits
    assert culprit.effects[OTHER].ci[0] < -0.15 < culprit.effects[OTHER].ci[1]
    # more trials show OTHER about -5% there: ruled out, and OTHER is unchanged
    observations[1] = two([1.0, 1.0, 1.01, 0.99], [1.03, 0.98, 1.0, 1.01])
    observations[2] = two([0.6, 0.61, 0.6, 0.6, 0.6], [0.95, 0.912, 0.988, 0.95, 0.94])
    plan = plan_next(3, observations, config)
    assert plan.done
    by_case = {c.case: c for c in decide(3, observations, plan, config, (CASE, OTHER)).cases}
    assert by_case[CASE].outcome == Outcome.regressed
    assert by_case[OTHER].outcome == Outcome.unchanged and by_case[OTHER].bound < 0.15


def test_a_step_neither_reached_nor_ruled_out_at_the_cap_is_inconclusive_and_says_where() -> None:
    # OTHER moves by -14.4% [-18.7, -9.9] at the culprit: DIFFERENT there, but not by the minimum
    config = BisectConfig(min_effect=0.15, max_trials=6)
    observations = {0: two([1.0, 1.01, 0.99] * 2, [1.0, 0.96, 1.04] * 2), 1: two([1.0] * 6, [1.03, 0.98] * 3),
                    2: two([0.6, 0.61, 0.6] * 2, [0.86, 0.826, 0.894] * 2)}
    plan = plan_next(3, observations, config)
    assert plan.done
    by_case = {c.case: c for c in decide(3, observations, plan, config, (CASE, OTHER)).cases}
    assert by_case[CASE].outcome == Outcome.regressed
    other = by_case[OTHER]
    assert other.outcome == Outcome.inconclusive
    assert other.reason.startswith("the step at revision 2 (a culprit on other cases) is -14.4%")
    assert "neither reached nor ruled out: trial cap reached (6 trials per revision)" in other.reason


def test_a_case_ruled_unchanged_is_never_also_called_too_noisy_to_detect_that_step() -> None:
    """Issue 28: one run warned that the smallest detectable step on a case was 20.4% and called
    the same case "unchanged, no step beyond 13.8%". Enough trials at the ends rule out a step
    that one trial's noise alone could not: the warning then speaks of the machine, not of a
    step the run could not see."""
    import random

    rng = random.Random(4)
    noisy = [[math.exp(rng.gauss(0, 0.10)) for _ in range(12)] for _ in range(2)]
    config = BisectConfig(min_effect=0.15)
    result = decide(2, {0: ok(noisy[0]), 1: ok(noisy[1])}, plan_next(2, {0: ok(noisy[0]), 1: ok(noisy[1])}, config),
                    config, (CASE,))
    [case] = result.cases
    [report] = result.noise
    assert case.outcome == Outcome.unchanged and case.bound < 0.15
    assert report.detectable <= 0.15
    assert not (result.warning or "").startswith("noisy run")


def test_equal_ends_with_nothing_measured_between_say_a_hidden_step_would_not_be_seen() -> None:
    observations = {0: ok(CALM), 9: ok([v * 1.005 for v in CALM])}
    [case] = outcome_of(observations, n=10).cases
    assert case.outcome == Outcome.unchanged
    assert "only the ends were measured: a step undone within the 9 commits of the range" in case.reason
    assert "would not be seen: run with --scan auto" in case.reason
    assert case.unseen == 8 and case.gap == (0, 9)
    scanned = outcome_of({**observations, 5: ok(CALM)}, n=10, config=CONFIG)
    assert "only the ends" not in scanned.cases[0].reason
    # issue 46: one scan point halves the blind stretch but never makes "no step" unqualified
    assert scanned.cases[0].unseen == 4 and scanned.cases[0].gap == (0, 5)  # 1..4; 6..8 is narrower
    assert "a step undone within 5 consecutive commits would not be seen" in scanned.cases[0].reason
    every = outcome_of({i: ok(CALM) for i in range(10)}, n=10, config=CONFIG)
    assert every.cases[0].gap is None and every.gap is None and "would not be seen" not in every.cases[0].reason


def test_a_target_call_far_longer_than_the_control_call_is_warned_about() -> None:
    """Issue 28: a 20x slower target (9-29 ms against a 0.3-0.6 ms control) let drift through
    that the control did not share. The warning names the worst case and the factor; calls of
    similar cost, or 7x apart (the CPU demo's bf16 gemm), say nothing."""
    slow = CaseNoise(samples=200, call_ratios=[0.02, 0.05, 0.04])  # control time / target time
    near = CaseNoise(samples=200, call_ratios=[0.14, 0.15, 0.16])
    result = outcome_of({0: ok(CALM, CALM, cases=(CASE, OTHER)), 1: ok(CALM, CALM, cases=(CASE, OTHER))},
                        cases=(CASE, OTHER), noise={CASE: slow, OTHER: near})
    assert result.verdict == Outcome.unchanged
    assert result.warning.startswith(f"a target call takes 25x a control call on {CASE}: the control cancels")
    assert "choose a control of similar cost" in result.warning
    quiet = outcome_of({0: ok(CALM), 1: ok(CALM)}, noise={CASE: near})
    assert quiet.warning is None
    fast = outcome_of({0: ok(CALM), 1: ok(CALM)}, noise={CASE: CaseNoise(call_ratios=[30.0])})
    assert fast.warning.startswith(f"a control call takes 30x a target call on {CASE}")
