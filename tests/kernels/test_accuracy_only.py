"""An accuracy-only trial (the correctness sweep's): the accuracy check at one revision of the demo
repository, without warm-up or timing loop, in the result schema."""
from __future__ import annotations

from perfbisect.kernels import demo as demo_pkg
from perfbisect.kernels.harness.result import validate_result
from perfbisect.kernels.harness.runner import run_harness

CASE = {"suite": "gemm", "target": demo_pkg.GEMM_TARGET, "params": {"M": 256, "N": 256, "K": 520, "dtype": "fp32"}}


def test_accuracy_only_flags_wrong_results_without_timing(demo) -> None:
    spec = {"cases": [CASE], "device": "cpu", "accuracy_only": True, "seed": 3}
    wrong = run_harness(spec, demo.worktree(demo.event("k_tail_dropped")["sha"]), timeout_s=120)
    fixed = run_harness(spec, demo.worktree(demo.event("k_tail_fixed")["sha"]), timeout_s=120)
    for result in (wrong, fixed):
        validate_result(result)
        (case,) = result["cases"]
        assert case["target_ms"] == [] and case["control_ms"] == [] and case["median_ratio"] is None
        assert result["policy"]["accuracy_only"] is True
    assert wrong["cases"][0]["status"] == "wrong_results" and "above tolerance" in wrong["cases"][0]["error"]
    assert fixed["cases"][0]["status"] == "ok" and fixed["cases"][0]["accuracy_error"] < 1e-3
