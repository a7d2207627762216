"""run_harness end to end on a small custom-suite repository: a good trial, an adapter
for an old signature, the child's environment, a hanging kernel killed at the timeout,
import failures, and the result schema."""
from __future__ import annotations

import json
import time

import jsonschema
import pytest

from perfbisect.kernels.harness.result import failure_result, validate_result
from perfbisect.kernels.harness.runner import HARNESS_ROOT, _child_env, run_harness
from perfbisect.kernels.report import format_result

SUITE = "file:bench/tanh_bwd.py"
FAST_POLICY = {"min_samples": 5, "max_samples": 8, "max_time_s": 0.2, "rel_noise": 0.01,
               "warmup": 1}


def spec(target: str, **case) -> dict:
    return {"cases": [{"suite": SUITE, "target": target, "params": {"N": 4096}, **case}],
            "device": "cpu", "policy": FAST_POLICY, "cold": True, "seed": 7}


@pytest.fixture(scope="module")
def good_result(custom_repo):
    return run_harness(spec("mykern.ops:tanh_backward"), custom_repo, import_root="src",
                       timeout_s=120)


def test_good_trial_measures_target_and_control(good_result):
    assert good_result["status"] == "ok", good_result
    (case,) = good_result["cases"]
    assert case["status"] == "ok" and case["name"] == "file:bench/tanh_bwd.py N=4096"
    n = len(case["target_ms"])
    assert FAST_POLICY["min_samples"] <= n <= FAST_POLICY["max_samples"]
    assert len(case["control_ms"]) == len(case["ratio"]) == n
    assert case["ratio"][0] == pytest.approx(case["control_ms"][0] / case["target_ms"][0])
    assert case["accuracy_error"] < 1e-6
    assert case["metric"]["name"] == "GB/s" and case["metric"]["target"] > 0
    assert good_result["device"]["kind"] == "cpu" and good_result["device"]["l2_bytes"] > 0
    assert good_result["fingerprint_basis"]["cold"] is True
    assert good_result["seed"] == 7 and good_result["policy"]["max_samples"] == 8


def test_the_trial_records_the_worktree_files_it_imported(good_result, custom_repo):
    """Hunk localization (issue 43) searches only these: the target's module, not the suite file
    (outside the worktree), torch or the harness."""
    assert "src/mykern/ops.py" in good_result["imported"]
    assert all(not name.startswith(("/", "..")) for name in good_result["imported"])
    assert not any("torch" in name or "harness" in name for name in good_result["imported"])


def test_inputs_are_fresh_per_trial_unless_the_seed_is_pinned(custom_repo):
    unpinned = {**spec("mykern.ops:tanh_backward"), "seed": None}
    seeds = {run_harness(unpinned, custom_repo, import_root="src", timeout_s=120)["seed"]
             for _ in range(2)}
    assert len(seeds) == 2


def test_results_validate_against_the_schema(good_result):
    validate_result(good_result)
    validate_result(failure_result("build_error", "make: *** [all] Error 2"))
    broken = json.loads(json.dumps(good_result))
    broken["cases"][0]["status"] = "fast"
    with pytest.raises(jsonschema.ValidationError):
        validate_result(broken)
    del broken["cases"][0]["ratio"]
    with pytest.raises(jsonschema.ValidationError):
        validate_result(broken)


def test_report_table_names_each_case(good_result):
    table = format_result(good_result)
    assert "file:bench/tanh_bwd.py N=4096" in table and "GB/s" in table and " ok" in table


def test_adapter_bridges_an_old_signature(custom_repo):
    without = run_harness(spec("mykern.ops:tanh_backward_old"), custom_repo, import_root="src",
                          timeout_s=120)
    assert without["cases"][0]["status"] == "error"
    assert "TypeError" in without["cases"][0]["error"]
    adapted = run_harness(spec("mykern.ops:tanh_backward_old", adapter="mykern.ops:adapt_old"),
                          custom_repo, import_root="src", timeout_s=120)
    assert adapted["status"] == "ok" and adapted["cases"][0]["status"] == "ok"


def test_child_gets_import_root_first_a_fresh_jit_cache_and_the_repo_env(custom_repo, tmp_path):
    seen = []
    for _ in range(2):
        out = tmp_path / f"env{len(seen)}.json"
        res = run_harness(spec("mykern.ops:report_env"), custom_repo, import_root="src",
                          env={"PERFBISECT_TEST_ENV_OUT": str(out), "MY_REPO_FLAG": "on"},
                          timeout_s=120)
        assert res["status"] == "ok", res
        seen.append(json.loads(out.read_text()))
    assert seen[0]["triton_cache"] != seen[1]["triton_cache"]
    assert seen[0]["cache_entries"] == []
    assert seen[0]["extra"] == "on"
    assert str((custom_repo / "src").resolve()) in seen[0]["sys_path"]
    assert seen[0]["cwd"] == str(custom_repo.resolve())


def test_hanging_kernel_is_killed_at_the_timeout(custom_repo):
    started = time.monotonic()
    res = run_harness(spec("mykern.ops:spin_forever"), custom_repo, import_root="src",
                      timeout_s=6)
    elapsed = time.monotonic() - started
    assert res["status"] == "timeout"
    assert "6 s timeout" in res["error"]
    assert elapsed < 20
    validate_result(res)


@pytest.mark.parametrize("target, fragment", [
    ("mykern.nothere:fn", "ModuleNotFoundError"),
    ("mykern.ops:no_such_function", "AttributeError"),
])
def test_unimportable_target_is_an_import_error(custom_repo, target, fragment):
    res = run_harness(spec(target), custom_repo, import_root="src", timeout_s=120)
    assert res["status"] == "import_error" and fragment in res["error"]
    assert res["cases"] == []


def test_missing_worktree_is_reported_not_raised(tmp_path):
    res = run_harness(spec("mykern.ops:tanh_backward"), tmp_path / "gone", timeout_s=30)
    assert res["status"] == "error" and res["error"]


def test_a_repositorys_pythonpath_comes_after_its_code_and_the_harness(tmp_path):
    """A repository env's PYTHONPATH adds directories; it neither replaces the import root and
    the harness (every trial failed to import perfbisect) nor comes before them."""
    env = _child_env(tmp_path / "repo", {}, {"PYTHONPATH": "/tmp/planted", "OTHER": "1"},
                     base_env={"PYTHONPATH": "/opt/site"})
    assert env["PYTHONPATH"].split(":") == [str(tmp_path / "repo"), str(HARNESS_ROOT), "/tmp/planted", "/opt/site"]
    assert env["OTHER"] == "1"
