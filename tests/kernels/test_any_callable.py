"""Suites for libraries whose outputs are not tensors: a symbolic-expression library timed in
calls per second, its outputs compared by the suite's own rule or the default for plain values,
inputs that the reference cache never repr()s, and `perfbisect suite check` explaining a broken
suite one line per problem."""
from __future__ import annotations

import statistics
import subprocess
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.kernels.harness.refcache import input_digest
from perfbisect.kernels.harness.result import validate_result
from perfbisect.kernels.harness.runner import run_harness
from perfbisect.kernels.harness.trial import MAX_REPEATS, balanced_repeats
from perfbisect.kernels.report import format_result
from perfbisect.kernels.suites.base import output_error
from perfbisect.cli.main import app
from tests.kernels.conftest import write_files

SYMLIB = """
    class Expr:
        '''A tiny symbolic sum tree. Its repr recurses without end, as a careless printer
        of a cyclic structure would: the harness must never call it.'''

        def __init__(self, terms):
            self.terms = tuple(terms)
            self.me = self

        def __repr__(self):
            return f"Expr({self.me!r})"

        def __eq__(self, other):
            return isinstance(other, Expr) and sorted(self.terms) == sorted(other.terms)

        __hash__ = None


    def make(n):
        return Expr([("x", i % 7) for i in range(n)])


    def collect(expr):                   # the library's fast path: one pass with a dict
        counts = {}
        for name, power in expr.terms:
            counts[(name, power)] = counts.get((name, power), 0) + 1
        return Expr([(f"{c}*{name}", power) for (name, power), c in counts.items()])


    def collect_wrong(expr):             # fast, but forgets a term
        return Expr(list(collect(expr).terms)[1:])
"""

SUITE = """
    import symlib

    METRIC = "kcall/s"
    METRIC_SCALE = 1e3

    def make_inputs(params, device, generator):
        return (symlib.make(params["n"]),)

    def work(params):
        return 1

    def reference(inputs, params):
        return symlib.collect(*inputs)

    def control(inputs, params):     # the obvious quadratic version, in the same process
        (expr,) = inputs
        seen = []
        for term in expr.terms:
            if term not in seen:
                seen.append(term)
        return [(t, expr.terms.count(t)) for t in seen]
"""

BROKEN_SUITE = """
    import symlib

    def make_inputs(params, device, generator):
        return (symlib.make(params["n"]),)

    def work(params):
        return 1

    def reference(inputs, params):
        raise KeyError("no reference for n")

    def control(inputs, params):
        return None
"""

POLICY = {"min_samples": 5, "max_samples": 8, "max_time_s": 0.2, "rel_noise": 0.01, "warmup": 1}


@pytest.fixture(scope="module")
def symrepo(tmp_path_factory) -> Path:
    root = write_files(tmp_path_factory.mktemp("symrepo"), {"src/symlib/__init__.py": SYMLIB,
                                                            "bench/sym_suite.py": SUITE,
                                                            "bench/broken_suite.py": BROKEN_SUITE})
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "symlib"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    return root


def _trial(symrepo: Path, target: str) -> dict:
    spec = {"cases": [{"suite": "file:bench/sym_suite.py", "target": target, "params": {"n": 300}}],
            "device": "cpu", "policy": POLICY, "cold": True, "seed": 1}
    result = run_harness(spec, symrepo, import_root="src", timeout_s=120)
    assert result["status"] == "ok", result
    return result["cases"][0]


def test_a_symbolic_library_is_timed_in_calls_per_second_and_checked_by_equality(symrepo):
    case = _trial(symrepo, "symlib:collect")
    assert case["status"] == "ok" and case["accuracy_error"] == 0.0
    target_ms = statistics.median(case["target_ms"])
    assert case["metric"]["name"] == "kcall/s"
    assert case["metric"]["target"] == pytest.approx(1 / (target_ms * 1e-3) / 1e3, rel=0.05)


def test_a_wrong_symbolic_result_is_wrong_results(symrepo):
    case = _trial(symrepo, "symlib:collect_wrong")
    assert case["status"] == "wrong_results" and "above tolerance" in case["error"]


@pytest.mark.parametrize(("out", "ref", "expected"), [
    (3.0, 3.0, 0.0), (3.3, 3.0, pytest.approx(0.1)), ([1.0, (2.0, 2.2)], [1.0, (2.0, 2.0)], pytest.approx(0.1)),
    ([1, 2], [1, 2, 3], float("inf")), ({"a": 1.0}, {"b": 1.0}, float("inf")), ("x+1", "x+1", 0.0),
    ("x+1", "1+x", float("inf")), (None, 2.0, float("inf")), (True, 1.0, float("inf")),
])
def test_the_default_comparison_of_plain_outputs(out, ref, expected):
    assert output_error(out, ref) == expected


def test_input_digests_never_call_an_objects_repr():
    class Loud:
        def __repr__(self):
            raise AssertionError("repr called")

    deep = (1, [2.0, "three", {"four": (Loud(),)}])
    for _ in range(300):
        deep = (deep,)
    assert input_digest((deep,)) == input_digest((deep,))
    assert input_digest((1, "a")) != input_digest((1, "b"))


def test_suite_check_passes_a_good_suite(symrepo):
    result = CliRunner().invoke(app, ["suite", "check", str(symrepo / "bench/sym_suite.py"), "--shape", "n=50",
                                      "--target", "symlib:collect", "--repo", str(symrepo), "--import-root", "src"])
    assert result.exit_code == 0, result.output
    assert "target vs reference" in result.output and "FAIL" not in result.output


def test_suite_check_explains_each_problem_in_one_line(symrepo):
    result = CliRunner().invoke(app, ["suite", "check", str(symrepo / "bench/broken_suite.py"), "--shape", "n=50",
                                      "--target", "symlib:collect", "--repo", str(symrepo), "--import-root", "src"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("FAIL") and "protocol" in line and "METRIC" in line for line in lines), result.output


def test_suite_check_names_a_reference_that_raises(symrepo, tmp_path):
    fixed = tmp_path / "metric_suite.py"
    fixed.write_text('METRIC = "call/s"\n' + (symrepo / "bench/broken_suite.py").read_text())
    result = CliRunner().invoke(app, ["suite", "check", str(fixed), "--shape", "n=50", "--target", "symlib:collect_wrong",
                                      "--repo", str(symrepo), "--import-root", "src"])
    assert result.exit_code == 1, result.output
    assert "FAIL  reference" in result.output and "KeyError" in result.output


def test_suite_check_refuses_an_unknown_revision(symrepo):
    result = CliRunner().invoke(app, ["suite", "check", str(symrepo / "bench/sym_suite.py"), "--shape", "n=5",
                                      "--repo", str(symrepo), "--rev", "no-such-rev"])
    assert result.exit_code == 2 and "cannot read revision" in result.output


@pytest.mark.parametrize(("target_ms", "control_ms", "expected"), [
    (1.0, 1.0, (1, 1)), (4.9, 1.0, (1, 1)), (20.0, 0.4, (1, 50)), (0.4, 20.0, (50, 1)),
    (900.0, 0.01, (1, MAX_REPEATS)), (0.0, 1.0, (1, 1)),
])
def test_the_faster_side_is_repeated_to_fill_the_slower_sides_window(target_ms, control_ms, expected):
    assert balanced_repeats(target_ms, control_ms, factor=5.0) == expected


def test_a_slow_target_is_timed_against_as_many_control_calls(symrepo):
    """The symbolic target (hundreds of Python calls) against a control that only sums: each
    sample times several control calls, the result says how many, and `measure` explains it."""
    (symrepo / "bench/slow_suite.py").write_text(textwrap.dedent(SUITE).replace(
        "def control(inputs, params):", "def control(inputs, params):\n    return len(inputs[0].terms)\n\n\ndef unused(inputs, params):"))
    spec = {"cases": [{"suite": "file:bench/slow_suite.py", "target": "symlib:collect", "params": {"n": 3000}}],
            "device": "cpu", "policy": POLICY, "cold": False, "seed": 1}
    result = run_harness(spec, symrepo, import_root="src", timeout_s=120)
    case = result["cases"][0]
    assert case["status"] == "ok", result
    assert case["repeats"]["target"] == 1 and case["repeats"]["control"] > 5
    validate_result(result)
    assert "each sample times" in format_result(result)


def test_measure_shows_the_uncertainty_of_the_median_ratio_not_one_samples_spread():
    """Under load single samples vary by hundreds of percent while the median of 40 is usable:
    the column is the standard error of the median ratio."""
    ratios = [0.5, 0.52, 0.48, 0.5, 1.9, 0.51, 0.49, 0.05] * 5
    result = {"status": "ok", "device": {"kind": "cpu"}, "wall_s": 1.0, "cases": [{
        "name": "x", "metric": {"name": "GB/s", "target": 1.0, "control": 0.5}, "median_ratio": 0.5,
        "ratio": ratios, "target_ms": [1.0] * 40, "accuracy_error": 0.0, "tolerance": 1e-3, "status": "ok"}]}
    row = format_result(result).splitlines()[-1]
    spread = statistics.stdev(ratios) / statistics.median(ratios)       # one sample's: 90%
    assert "±ratio" in format_result(result) and f"±{spread * 1.2533 / 40 ** 0.5:.1%}" in row
    assert f"{spread:.1%}" not in row


def test_suite_check_imports_what_preload_names_and_says_what_fails(symrepo, tmp_path):
    good, bad = tmp_path / "preload_suite.py", tmp_path / "bad_preload_suite.py"
    good.write_text('PRELOAD = ["symlib"]\n' + (symrepo / "bench/sym_suite.py").read_text())
    bad.write_text('PRELOAD = ["symlib", "no_such_library"]\n' + (symrepo / "bench/sym_suite.py").read_text())
    args = ["--shape", "n=50", "--repo", str(symrepo), "--import-root", "src"]
    result = CliRunner().invoke(app, ["suite", "check", str(good), *args])
    assert result.exit_code == 0, result.output
    assert any("preload" in line and "symlib imported in" in line for line in result.output.splitlines())
    result = CliRunner().invoke(app, ["suite", "check", str(bad), *args])
    assert result.exit_code == 1
    assert any(line.startswith("FAIL") and "no_such_library does not import: ModuleNotFoundError" in line
               for line in result.output.splitlines()), result.output
