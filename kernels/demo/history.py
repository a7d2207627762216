"""The demo repository's history: a list of commits, each a change of state, with the
planted events marked. Everything here is data; writer.py turns it into git commits."""
from __future__ import annotations

from dataclasses import dataclass, field

from perfbisect.kernels.demo.minicc import PIN_FILE as MINICC_PIN
from perfbisect.kernels.demo.minicc import PIN_TOKEN as MINICC_HEAD
from perfbisect.kernels.demo.minicc import ROOT_TOKEN as MINICC_ROOT

MINICC_PIN_TEXT = '# minicc, the code generator (minicc.py)\nREV = "{}"\n'

INITIAL_STATE = {
    "version": "0.3.0", "gemm_doc": "", "attn_doc": "", "rms_doc": "",
    "utils_cdiv": "cdiv", "gemm_cdiv": "cdiv", "attn_cdiv": "cdiv",
    "bf16_group_m": 8, "bf16_block_k": 64, "k_tail": True, "exp_mode": "exp2",
    "rms_blocks": False, "rms_weight_check": False, "cleanup": False, "fp32_self_check": False,
}


@dataclass(frozen=True)
class Commit:
    subject: str
    state: dict = field(default_factory=dict)     # updates to the package state
    files: dict = field(default_factory=dict)     # other files written (path -> text)
    event: str | None = None                      # key into EVENTS for planted commits


README = """# minikern

A small kernel library: a Triton GEMM with a grouped (L2-swizzled) launch order, a
flash-attention forward and an RMSNorm, each with a torch implementation used on the
CPU or where Triton is missing.

```python
import torch, minikern
c = minikern.matmul(a, b)
o = minikern.attention(q, k, v, causal=True)
y = minikern.rms_norm(x, w)
```
{extra}"""

TEST_GEMM = """import pytest
import torch

import minikern


@pytest.mark.parametrize("shape", {shapes})
def test_matmul_matches_torch(shape):
    m, n, k = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.testing.assert_close(minikern.matmul(a, b), a @ b, rtol=1e-4, atol={atol})
"""

TEST_ATTENTION = """import pytest
import torch

import minikern


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", {seqs})
def test_attention_matches_sdpa(causal, seq):
    torch.manual_seed({seed})
    q, k, v = (torch.randn(1, 2, seq, 32) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(minikern.attention(q, k, v, causal), ref, rtol=1e-4, atol=1e-4)
"""

TEST_RMSNORM = """import torch

import minikern


def test_rms_norm_float64_reference():
    x, w = torch.randn(8, 256), torch.rand(256) + 0.5
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    torch.testing.assert_close(minikern.rms_norm(x, w).double(), ref, rtol=1e-5, atol=1e-5)
"""

CI = """name: ci
on: [pull_request]
jobs:
  cpu:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with: {{python-version: "{py}"}}
      - run: pip install torch pytest{extra}
      - run: pytest -q tests
"""

BENCH = """\"\"\"Benchmark minikern.{op} against torch.\"\"\"
import time

import torch

import minikern


def bench(fn, *args, reps=20):
    fn(*args)
    start = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    return (time.perf_counter() - start) / reps * 1e3


if __name__ == "__main__":
    {body}
"""


def _changelog(*versions: str) -> str:
    lines = ["# Changelog", ""]
    for version in versions:
        lines += [f"## {version}", "", "- kernels and fixes, see the pull requests", ""]
    return "\n".join(lines)


COMMITS: list[Commit] = [
    Commit("Initial import of minikern: Triton GEMM, flash-attention forward and RMSNorm (#901)",
           files={"README.md": README.format(extra=""), ".gitignore": "__pycache__/\n*.pyc\n",
                  MINICC_PIN: MINICC_PIN_TEXT.format(MINICC_ROOT)}),
    Commit("Add README usage notes and supported dtypes (#903)",
           files={"README.md": README.format(extra="\nSupported dtypes: bf16, fp16, fp32.\n")}),
    Commit("tests: matmul against torch.matmul (#904)",
           files={"tests/test_gemm.py": TEST_GEMM.format(shapes=[(64, 64, 64)], atol=1e-3)}),
    Commit("rmsnorm: normalize in blocks of rows (#905)", state={"rms_blocks": True}, event="rms_blocks"),
    Commit("ci: run the CPU test suite on every pull request (#906)",
           files={".github/workflows/ci.yml": CI.format(py="3.11", extra="")}),
    Commit("docs: explain the grouped launch order in gemm (#907)",
           state={"gemm_doc": "\nSee docs/tuning.md for the tile tables.\n"}),
    Commit("rmsnorm: reject a weight with NaN or inf (#908)", state={"rms_weight_check": True},
           event="rms_weight_check"),
    Commit("tests: attention, causal and non-causal (#909)",
           files={"tests/test_attention.py": TEST_ATTENTION.format(seqs=[64, 128], seed=0)}),
    Commit("rmsnorm: document the eps convention (#910)",
           state={"rms_doc": "\neps is added to the mean square, as in torch.nn.functional.rms_norm.\n"}),
    Commit("bench: add a GEMM benchmark script (#911)",
           files={"bench/bench_gemm.py": BENCH.format(op="matmul", body="a = b = torch.randn(512, 512)\n    print(bench(minikern.matmul, a, b))")}),
    Commit("gemm: retune bf16 tiles for H200 (#912)", state={"bf16_group_m": 1},
           event="swizzle_off_bf16"),
    Commit("Fix typo in README (#913)",
           files={"README.md": README.format(extra="\nSupported dtypes: bf16, fp16 and fp32.\n")}),
    Commit("tests: cover non-square matmul shapes (#914)",
           files={"tests/test_gemm.py": TEST_GEMM.format(shapes=[(64, 64, 64), (96, 40, 72)], atol=1e-3)}),
    Commit("Bump version to 0.3.1 (#915)", state={"version": "0.3.1"}),
    Commit("docs: add a CHANGELOG (#916)", files={"CHANGELOG.md": _changelog("0.3.1", "0.3.0")}),
    Commit("attention: document the online-softmax recurrence (#917)",
           state={"attn_doc": "\nThe running max m and sum l are rescaled by exp(m_old - m_new) per block.\n"}),
    Commit("refactor: rename cdiv to ceil_div in _utils (#918)",
           state={"utils_cdiv": "ceil_div", "gemm_cdiv": "ceil_div"}, event="import_broken"),
    Commit("docs: describe the CPU fallback paths (#919)",
           files={"docs/cpu.md": "# CPU paths\n\nWithout Triton, every op runs its torch implementation.\n"}),
    Commit("ci: cache pip downloads (#920)",
           files={".github/workflows/ci.yml": CI.format(py="3.11", extra=" --cache-dir ~/.cache/pip")}),
    Commit("attention: import ceil_div after the helper rename (#921)",
           state={"attn_cdiv": "ceil_div"}, event="import_fixed"),
    Commit("tests: rmsnorm against a float64 reference (#922)",
           files={"tests/test_rmsnorm.py": TEST_RMSNORM}),
    Commit("bench: attention across sequence lengths (#923)",
           files={"bench/bench_attention.py": BENCH.format(op="attention", body="for s in (256, 1024):\n        q = torch.randn(1, 2, s, 64)\n        print(s, bench(minikern.attention, q, q, q))")}),
    # the exp path now comes from minicc, bumped across its own regression (kernels/demo/minicc.py)
    Commit("attention: take the exp path from minicc, bump minicc for parity with the reference (#924)",
           state={"exp_mode": "minicc"}, files={MINICC_PIN: MINICC_PIN_TEXT.format(MINICC_HEAD)},
           event="fastmath_dropped"),
    Commit("docs: note the tested Triton versions (#925)",
           files={"docs/triton.md": "# Triton\n\nTested with Triton 3.4 to 3.6.\n"}),
    Commit("Add a CONTRIBUTING guide (#926)",
           files={"CONTRIBUTING.md": "# Contributing\n\nOpen a pull request with a benchmark before/after.\n"}),
    Commit("tests: seed the random inputs (#927)",
           files={"tests/test_attention.py": TEST_ATTENTION.format(seqs=[64, 128], seed=1234)}),
    Commit("rmsnorm: clarify the weight dtype in the docstring (#928)",
           state={"rms_doc": "\neps is added to the mean square, as in torch.nn.functional.rms_norm.\nThe weight has the input's dtype.\n"}),
    Commit("Bump version to 0.3.2 (#929)", state={"version": "0.3.2"}),
    Commit("[cleanup] tidy docstrings across the kernels; gemm: BLOCK_K=32 for bf16 to relieve shared memory (#930)",
           state={"bf16_block_k": 32, "cleanup": True}, event="block_k_small_step"),
    Commit("ci: add a lint job (#931)",
           files={".github/workflows/lint.yml": "name: lint\non: [pull_request]\njobs:\n  ruff:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n      - run: pipx run ruff check .\n"}),
    Commit("docs: tuning notes for Hopper (#932)",
           files={"docs/tuning.md": "# Tuning\n\nbf16 GEMM: 128x256 tiles, 4 stages, 8 warps, GROUP_M=8.\n"}),
    Commit("tests: larger K in the matmul tests (#933)",
           files={"tests/test_gemm.py": TEST_GEMM.format(shapes=[(64, 64, 64), (96, 40, 72), (64, 64, 512)], atol=1e-3)}),
    Commit("Add pyproject metadata (#934)",
           files={"pyproject.toml": "[project]\nname = \"minikern\"\nversion = \"0.3.2\"\ndependencies = [\"torch\"]\n"}),
    Commit("gemm: hoist the K-loop trip count (#935)", state={"k_tail": False},
           event="k_tail_dropped"),
    Commit("bench: print TFLOP/s next to the times (#936)",
           files={"bench/bench_gemm.py": BENCH.format(op="matmul", body="a = b = torch.randn(512, 512)\n    ms = bench(minikern.matmul, a, b)\n    print(ms, 2 * 512 ** 3 / ms / 1e9, 'TFLOP/s')")}),
    Commit("docs: attention layout is [B, H, S, D] (#937)",
           state={"attn_doc": "\nThe running max m and sum l are rescaled by exp(m_old - m_new) per block.\nTensors are laid out [B, H, S, D].\n"}),
    Commit("tests: causal attention with odd lengths (#938)",
           files={"tests/test_attention.py": TEST_ATTENTION.format(seqs=[64, 128, 77], seed=1234)}),
    Commit("Update README examples (#939)",
           files={"README.md": README.format(extra="\nSupported dtypes: bf16, fp16 and fp32. See bench/ for benchmarks.\n")}),
    Commit("gemm: handle K not a multiple of the K tile (#940)", state={"k_tail": True},
           event="k_tail_fixed"),
    Commit("ci: test on Python 3.12 (#941)",
           files={".github/workflows/ci.yml": CI.format(py="3.12", extra=" --cache-dir ~/.cache/pip")}),
    Commit("Bump version to 0.3.3 (#942)", state={"version": "0.3.3"}),
    Commit("docs: explain the L2 swizzle with a diagram (#943)",
           state={"gemm_doc": "\nSee docs/tuning.md for the tile tables.\n\n  pid:  0 1 2 3 | 4 5 6 7   (GROUP_M=4: down a column panel, then across)\n"}),
    Commit("tests: matmul tolerance per dtype (#944)",
           files={"tests/test_gemm.py": TEST_GEMM.format(shapes=[(64, 64, 64), (96, 40, 72), (64, 64, 520)], atol=2e-3)}),
    # the planted spread step (issue 46): one fp32 CPU call in four runs a float64 check
    Commit("gemm: check one fp32 CPU call in four against a float64 matmul (#949)",
           state={"fp32_self_check": True}, event="fp32_self_check"),
    Commit("gemm: grouped launch order for bf16 again, GROUP_M=4 (#945)",
           state={"bf16_group_m": 4}, event="swizzle_partial_recovery"),
    Commit("bench: add an RMSNorm benchmark (#946)",
           files={"bench/bench_rmsnorm.py": BENCH.format(op="rms_norm", body="x = torch.randn(4096, 4096)\n    print(bench(minikern.rms_norm, x, torch.ones(4096)))")}),
    Commit("docs: CHANGELOG for 0.4.0 (#947)",
           files={"CHANGELOG.md": _changelog("0.4.0", "0.3.3", "0.3.2", "0.3.1", "0.3.0")}),
    Commit("Release 0.4.0 (#948)", state={"version": "0.4.0"}),
    Commit("ci: pin Triton in the GPU job (#950)",
           files={".github/workflows/gpu.yml": "name: gpu\non: [workflow_dispatch]\njobs:\n  h200:\n    runs-on: [self-hosted, h200]\n    steps:\n      - uses: actions/checkout@v4\n      - run: pip install triton==3.6.0 && pytest -q tests\n"}),
]
