"""Descent planning on literal two-level histories (service/bisect/descent.py): a host whose
culprit #945 bumps minicc a..c; inside, minicc's culprit c2f0 bumps its own dependency minilib;
inside that, minilib's culprit. Which children start, at which level, and the report's chain."""

from __future__ import annotations

from perfbisect.service.bisect.descent import MAX_LEVEL, Bump, Step, chain_line, conclude, deeper, plan

CASE = "attention seq=8192"
A, C = "a1b2c3d4" + "0" * 32, "c3d4e5f6" + "0" * 32
X, Y = "7" * 40, "9" * 40

MINICC_BUMP = Bump("minicc", A, C)
MINILIB_BUMP = Bump("minilib", X, Y)

# level 0: the host's bisect found two culprits: #945 bumps minicc (and touches a test), #950 does not
HOST = [Step("#945", "bump minicc", True, {CASE: (-0.104, (-0.11, -0.098))}, (MINICC_BUMP,), ("tests/test_x.py",)),
        Step("#950", "threshold", True, {CASE: (-0.014, (-0.02, -0.008))})]
# level 1: minicc's range a..c holds a harmless change and the regression, which bumps minilib
MINICC = [Step("c2f0a1b", "route maxnumf through the raw builder", True, {CASE: (-0.101, (-0.108, -0.095))},
               (MINILIB_BUMP,))]
# level 2: minilib's one culprit, which bumps yet another dependency (level 3: never)
MINILIB = [Step("5e6f7a8", "drop fastmath", True, {CASE: (-0.099, (-0.107, -0.091))}, (Bump("deeper", X, Y),))]


def test_level_zero_descends_into_the_bump_only():
    assert [(d.culprit, d.bump, d.level) for d in plan(HOST, 0)] == [(0, MINICC_BUMP, 1)]


def test_level_one_descends_into_the_dependency_of_the_dependency():
    assert [(d.culprit, d.bump, d.level) for d in plan(MINICC, 1)] == [(0, MINILIB_BUMP, 2)]


def test_no_third_level():
    assert MAX_LEVEL == 2
    assert plan(MINILIB, 2) == []


def test_a_range_culprit_or_an_unmoved_pin_is_not_descended():
    ranged = Step("#940..#945", "", False, {CASE: (-0.1, (-0.11, -0.09))}, (MINICC_BUMP,))
    same = Step("#946", "", True, {CASE: (-0.1, (-0.11, -0.09))}, (Bump("minicc", A, A),))
    assert plan([ranged, same], 0) == []


def test_chain_two_levels():
    first = conclude(CASE, HOST[0], MINICC_BUMP, MINICC, min_effect=0.02)
    second = conclude(CASE, MINICC[0], MINILIB_BUMP, MINILIB, min_effect=0.02)
    assert first.explained and second.explained
    line = chain_line(deeper(first, second))
    assert line == ("#945 bumps minicc a1b2c3d..c3d4e5f; inside it, minicc c2f0a1b 'route maxnumf through the raw "
                    "builder', which bumps minilib 7777777..9999999; inside it, minilib 5e6f7a8 'drop fastmath': "
                    "-9.9% [-10.7%, -9.1%]")


def test_chain_one_level():
    line = chain_line(conclude(CASE, HOST[0], MINICC_BUMP, MINICC, min_effect=0.02))
    assert line == ("#945 bumps minicc a1b2c3d..c3d4e5f; inside it, minicc c2f0a1b 'route maxnumf through the raw "
                    "builder': -10.1% [-10.8%, -9.5%]")


def test_left_outside_when_the_dependency_has_no_step():
    finding = conclude(CASE, HOST[0], MINICC_BUMP, [], min_effect=0.02)
    assert not finding.explained and finding.outside == ("tests/test_x.py",)
    assert chain_line(finding) == ("#945 bumps minicc a1b2c3d..c3d4e5f: -10.4% [-11.0%, -9.8%] left outside: the "
                                   "dependency's range shows no step of its own; the bump's other changes: "
                                   "tests/test_x.py")


def test_left_outside_when_the_dependency_step_is_too_small_or_split():
    small = [Step("c2f0a1b", "harmless", True, {CASE: (-0.03, (-0.035, -0.025))})]
    assert not conclude(CASE, HOST[0], MINICC_BUMP, small, min_effect=0.02).explained
    split = [Step("c1", "", True, {CASE: (-0.05, (-0.06, -0.04))}), Step("c2", "", True, {CASE: (-0.05, (-0.06, -0.04))})]
    finding = conclude(CASE, HOST[0], MINICC_BUMP, split, min_effect=0.02)
    assert not finding.explained
    assert "the dependency's own steps (c1 -5.0%, c2 -5.0%) do not account for it" in chain_line(finding)


def test_an_improvement_inside_does_not_explain_a_regression():
    better = [Step("c2f0a1b", "", True, {CASE: (0.104, (0.098, 0.11))})]
    assert not conclude(CASE, HOST[0], MINICC_BUMP, better, min_effect=0.02).explained


def test_a_deeper_level_that_does_not_explain_keeps_the_chain():
    first = conclude(CASE, HOST[0], MINICC_BUMP, MINICC, min_effect=0.02)
    nothing = conclude(CASE, MINICC[0], MINILIB_BUMP, [], min_effect=0.02)
    assert deeper(first, nothing) == first


# a toolchain bisect's step: tinyop 2.0 after 1.0 (versions, no commit of the host moved anything)
TINYOP_BUMP = Bump("tinyop", "1.0", "2.0", toolchain=True)
VERSION_STEP = Step("tinyop==2.0", "tinyop 2.0", True, {CASE: (-0.66, (-0.69, -0.63))}, (TINYOP_BUMP,))


def test_a_toolchain_chain_names_the_versions_then_the_commit():
    inside = [Step("e2c49a9", "recompute the product", True, {CASE: (-0.64, (-0.67, -0.61))})]
    finding = conclude(CASE, VERSION_STEP, TINYOP_BUMP, inside, min_effect=0.3)
    assert chain_line(finding) == ("tinyop 1.0 -> 2.0; inside it, tinyop e2c49a9 'recompute the product': "
                                   "-64.0% [-67.0%, -61.0%]")


def test_a_toolchain_step_the_source_builds_do_not_show_is_left_to_the_wheels():
    assert chain_line(conclude(CASE, VERSION_STEP, TINYOP_BUMP, [], min_effect=0.3)) == (
        "tinyop 1.0 -> 2.0: -66.0% [-69.0%, -63.0%] left outside: the dependency's range shows no step of its own; "
        "the versions built from source show no step: look at how their wheels were built")
    small = [Step("e2c49a9", "", True, {CASE: (-0.2, (-0.25, -0.15))})]
    assert chain_line(conclude(CASE, VERSION_STEP, TINYOP_BUMP, small, min_effect=0.3)).endswith(
        "the dependency's own steps (e2c49a9 -20.0%) do not account for it; the rest is between the wheels and the "
        "commits built from source")
