"""Shape strings, case names, suite lookup and parameter validation (what the API uses
to answer 4xx)."""
from __future__ import annotations

import pytest

from perfbisect.kernels.cases import DTYPE_ALIASES, case_name, parse_shape
from perfbisect.kernels.suites import UnknownSuite, get_suite


def test_parse_shape_types():
    assert parse_shape("M=8192,N=8192,K=8192,dtype=bf16") == {
        "M": 8192, "N": 8192, "K": 8192, "dtype": "bf16"}
    assert parse_shape(" B=2, S=1024 ,causal=true,eps=1e-6") == {
        "B": 2, "S": 1024, "causal": True, "eps": 1e-6}


@pytest.mark.parametrize("text, fragment", [
    ("", "empty shape"),
    ("M=1,,N=2", "bad shape item ''"),
    ("M=1,N", "bad shape item 'N'"),
    ("M=1,=3", "bad shape item '=3'"),
    ("M=1,N=", "bad shape item 'N='"),
    ("M=1,M=2", "given twice"),
])
def test_parse_shape_errors(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_shape(text)


def test_case_name_is_canonical():
    from_string = case_name("gemm", "K=512,dtype=fp32,M=512,N=256")
    from_dict = case_name("gemm", {"M": 512, "N": 256, "K": 512, "dtype": "fp32"})
    assert from_string == from_dict == "gemm M=512,N=256,K=512,dtype=fp32"
    assert case_name("attention", {"S": 4, "B": 1, "H": 2, "D": 8, "causal": True,
                                   "dtype": "bf16"}) == "attention B=1,H=2,S=4,D=8,causal=true,dtype=bf16"


def test_unknown_suite_is_a_value_error_with_a_message():
    with pytest.raises(UnknownSuite, match="unknown suite 'conv'"):
        get_suite("conv")
    assert issubclass(UnknownSuite, ValueError)


@pytest.mark.parametrize("suite, params, fragment", [
    ("gemm", {"M": 8, "N": 8}, "missing parameter 'K'"),
    ("gemm", {"M": 8, "N": 8, "K": 0}, "K=0 must be a positive integer"),
    ("gemm", {"M": 8, "N": 8, "K": "x"}, "must be a positive integer"),
    ("gemm", {"M": 8, "N": 8, "K": 8, "dtype": "int3"}, "unknown dtype 'int3'"),
    ("gemm", {"M": 8, "N": 8, "K": 8, "Q": 1}, "unknown parameter"),
    ("attention", {"B": 1, "H": 1, "S": 8, "D": 8, "causal": "maybe"}, "causal"),
    ("rmsnorm", {"M": 8}, "missing parameter 'N'"),
])
def test_validate_rejects_bad_params(suite, params, fragment):
    with pytest.raises(ValueError, match=fragment):
        get_suite(suite).validate(params)


def test_validate_normalises():
    params = get_suite("attention").validate({"B": 1, "H": 2, "S": 8, "D": 4, "dtype": "bfloat16"})
    assert params["dtype"] == "bf16" and params["causal"] is False


def test_work_counts():
    assert get_suite("gemm").work({"M": 2, "N": 3, "K": 4, "dtype": "fp32"}) == 48
    attn = get_suite("attention")
    full = attn.work({"B": 1, "H": 2, "S": 8, "D": 4, "causal": False})
    assert full == 4 * 2 * 64 * 4
    assert attn.work({"B": 1, "H": 2, "S": 8, "D": 4, "causal": True}) == full / 2
    assert get_suite("rmsnorm").work({"M": 4, "N": 8, "dtype": "bf16"}) == 2 * (2 * 32 + 8)


def test_custom_suite_must_stay_inside_the_repository(custom_repo):
    suite = get_suite("file:bench/tanh_bwd.py", custom_repo)
    assert suite.metric_name == "GB/s" and suite.tolerance({}) == 1e-5
    with pytest.raises(ValueError, match="N must be a positive integer"):
        suite.validate({"N": 0})
    with pytest.raises(UnknownSuite, match="inside the repository"):
        get_suite("file:../outside.py", custom_repo)
    with pytest.raises(UnknownSuite, match="not found"):
        get_suite("file:bench/missing.py", custom_repo)
    with pytest.raises(UnknownSuite, match="needs the repository"):
        get_suite("file:bench/tanh_bwd.py")


@pytest.mark.parametrize("alias", sorted(DTYPE_ALIASES) + ["BF16", "BFloat16", "FP32", "Torch.Float16", " half "])
def test_every_dtype_alias_names_the_case_as_the_harness_does(alias):
    from perfbisect.kernels.cases import normalise_params

    params = normalise_params({"M": 8, "N": 8, "K": 8, "dtype": alias})
    assert params["dtype"] == DTYPE_ALIASES[alias.strip().lower()]
    # the harness validates again inside the trial: the name must not move
    assert case_name("gemm", get_suite("gemm").validate(params)) == case_name("gemm", params)


def test_an_unknown_dtype_is_refused():
    from perfbisect.kernels.cases import normalise_params

    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        normalise_params({"dtype": "int3"})
