"""The seed's FlyDSL suites off ROCm: listed with the reason they cannot run here, stopped with it
in a trial, their cases validated, FLOPs and footprints counted; their input preparation and
reference on the CPU (the parts that are plain torch)."""
from __future__ import annotations

import pytest
import torch

from perfbisect.kernels.harness.devices import ROCM_ONLY
from perfbisect.kernels.harness.trial import run_trial
from perfbisect.kernels.suites import BUILTIN_SUITES, get_suite, suite_availability, suite_vendor
from perfbisect.kernels.suites.base import relative_error
from perfbisect.kernels.suites.flydsl import REF_ROWS, SEED_ATTENTION, SEED_GEMM, SuiteUnavailable, rocm_unavailable

ATTENTION_TARGET = "kernels.attention.flash_attn_interface:flydsl_flash_attn_func"
GEMM_TARGET = "kernels.gemm.preshuffle_gemm:compile_preshuffle_gemm"
on_rocm = getattr(torch.version, "hip", None) is not None


@pytest.mark.skipif(on_rocm, reason="this host has ROCm: the guard's other side")
def test_off_rocm_the_suites_are_listed_with_the_reason_and_a_trial_stops_with_it(tmp_path):
    assert ROCM_ONLY in rocm_unavailable()
    listed = suite_availability("cpu")
    assert listed["gemm"] is None and ROCM_ONLY in listed["flydsl_attention"] and ROCM_ONLY in listed["flydsl_gemm"]
    with pytest.raises(SuiteUnavailable, match=ROCM_ONLY):
        get_suite("flydsl_attention").resolve_target(ATTENTION_TARGET)
    spec = {"cases": [{"suite": "flydsl_gemm", "target": GEMM_TARGET, "params": SEED_GEMM[0]}], "device": "cpu"}
    result = run_trial(spec, tmp_path)
    assert result["status"] == "error" and ROCM_ONLY in result["error"] and result["cases"] == []


def test_the_seed_cases_validate_and_count_their_work():
    attention, gemm = get_suite("flydsl_attention"), get_suite("flydsl_gemm")
    seed = [attention.validate(p) for p in SEED_ATTENTION]
    assert [p["S"] for p in seed] == [61_380, 180_180, 239_580] and not any(p["causal"] for p in seed)
    # 4 B H S^2 D: at S = 239,580 one call is 1.88 PFLOP (1.48 s at the seed's 1,268 TFLOP/s)
    assert attention.work(seed[2]) == 4.0 * 2 * 32 * 239_580 ** 2 * 128
    assert attention.metric(seed[2], 1000 * attention.work(seed[2]) / 1268e12) == pytest.approx(1268.0)
    assert attention.footprint_bytes(seed[0]) == 4 * 2 * 61_380 * 32 * 128 * 2
    tiles = [gemm.validate(p) for p in SEED_GEMM]
    assert {(p["tile_m"], p["tile_n"], p["tile_k"]) for p in tiles} >= {(128, 256, 256), (128, 256, 64)}
    assert gemm.work(tiles[0]) == 2.0 * 54_560 * 8_192 * 8_192
    assert suite_vendor("flydsl_gemm") == "amd" and suite_vendor("gemm") is None
    assert set(BUILTIN_SUITES) >= {"flydsl_attention", "flydsl_gemm"}


@pytest.mark.parametrize(("suite", "params", "message"), [
    ("flydsl_gemm", {"M": 64, "N": 256, "K": 8192, "tile_m": 64, "tile_n": 256, "tile_k": 96}, "tile_k must divide K"),
    ("flydsl_gemm", {"M": 64, "N": 320, "K": 8192, "tile_m": 64, "tile_n": 256, "tile_k": 64}, "tile_n must divide N"),
    ("flydsl_gemm", {"M": 64, "N": 256, "K": 8192, "tile_m": 64, "tile_n": 256}, "missing parameter 'tile_k'"),
    ("flydsl_gemm", {"M": 64, "N": 256, "K": 8192, "tile_m": 0, "tile_n": 256, "tile_k": 64}, "positive integer"),
    ("flydsl_gemm", {"M": 64, "N": 256, "K": 256, "tile_m": 64, "tile_n": 256, "tile_k": 64, "dtype": "fp32"},
     "not one of bf16, fp16"),
    ("flydsl_attention", {"B": 2, "H": 32, "S": 128, "D": 128, "causal": "maybe"}, "must be true or false"),
    ("flydsl_attention", {"B": 2, "H": 32, "S": 128, "D": 128, "window": 4}, "unknown parameter"),
])
def test_bad_cases_are_refused_with_a_message(suite, params, message):
    with pytest.raises(ValueError, match=message):
        get_suite(suite).validate(params)


def test_the_attention_reference_matches_a_dense_softmax_on_the_sampled_rows():
    suite = get_suite("flydsl_attention")
    params = suite.validate({"B": 2, "H": 3, "S": 2 * REF_ROWS + 40, "D": 16, "dtype": "bf16"})
    gen = torch.Generator().manual_seed(0)
    q, k, v = suite.make_inputs(params, "cpu", gen)
    assert q.shape == (2, params["S"], 3, 16)  # BSHD, FlyDSL's and aiter's layout
    dense = torch.nn.functional.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v)))
    dense = dense.transpose(1, 2).to(q.dtype)  # back to BSHD, what a correct kernel returns
    checked = suite.check_output(dense, (q, k, v), params)
    reference = suite.reference((q, k, v), params)
    assert checked.shape == reference.shape == (2, 2 * REF_ROWS, 16)
    assert relative_error(checked, reference) < suite.tolerance(params)
    wrong = suite.check_output(torch.flip(dense, dims=[1]), (q, k, v), params)
    assert relative_error(wrong, reference) > suite.tolerance(params)


def test_the_gemm_reference_covers_the_first_and_last_rows_in_float64():
    suite = get_suite("flydsl_gemm")
    params = suite.validate({"M": 600, "N": 64, "K": 128, "tile_m": 64, "tile_n": 64, "tile_k": 64})
    a, w = suite.make_inputs(params, "cpu", torch.Generator().manual_seed(1))
    assert w.shape == (64, 128)  # [N, K]: C = A @ W^T
    out = (a.float() @ w.float().T).to(a.dtype)
    reference = suite.reference((a, w), params)
    assert reference.dtype == torch.float64 and reference.shape == (2 * REF_ROWS, 64)
    assert relative_error(suite.check_output(out, (a, w), params), reference) < suite.tolerance(params)
