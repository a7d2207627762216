"""Source text of minikern's small modules (RMSNorm, helpers, package init)."""

RMSNORM = '''"""RMSNorm over the last dimension: y = x * rsqrt(mean(x^2) + eps) * w.
@@RMS_DOC@@"""
import torch

from ._utils import HAS_TRITON, next_power_of_2, use_triton
@@CHECK_FN@@

def _normalize_rows(x, w, eps):
    """RMSNorm of a block of rows; `w` is the weight in float32."""
@@CPU_CHECK@@    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * w).to(x.dtype)


def _rms_norm_cpu(x, weight, eps):
    w = weight.float()
@@CPU_BODY@@

if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _rms_norm_kernel(X, W, Y, N, stride, eps, BLOCK_N: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / N + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


def _launch_rows(x, weight, y, eps):
    """One grid over the rows of `x` (contiguous), one program per row."""
@@GPU_CHECK@@    M, N = x.shape
    block = next_power_of_2(N)
    _rms_norm_kernel[(M,)](x, weight, y, N, x.stride(0), eps, BLOCK_N=block,
                           num_warps=min(16, max(4, block // 512)))


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm of a 2-D tensor over its last dimension."""
    if not use_triton(x):
        return _rms_norm_cpu(x, weight, eps)
    x = x.contiguous()
    y = torch.empty_like(x)
@@GPU_BODY@@    return y
'''

# The planted interacting pair. `rms_blocks` walks the rows in blocks (CPU: 8 rows, six small
# ops per block, 128 blocks for 1024 rows; GPU: grids of 1024 rows, a few more launches): -36% to
# -44% of the ratio with cold caches on a 2-core Xeon VM. Blocks of 16 rows cost -50% on an EPYC
# but only -5% to -14% on that Xeon, whose 480 MiB last-level cache a 96 MiB flush left warm:
# there the control's temporaries ride on pages the whole-tensor target had just touched, so the
# control slowed with the blocked target and the ratio hid most of the step (bench/RESULTS.md).
# `rms_weight_check` validates the weight where rows are normalized: two reductions and two host
# round trips per call, a few percent without the blocks, but once per block with them (128 per
# CPU call, 32 host syncs per GPU call): about -30% on top of the blocks.
RMS_BLOCKS = {
    False: {"CPU_BODY": "    return _normalize_rows(x, w, eps)\n",
            "GPU_BODY": "    _launch_rows(x, weight, y, eps)\n"},
    True: {"CPU_BODY": ("    # in blocks of rows: a block's float32 temporaries stay small and the allocator reuses\n"
                        "    # them, where whole-tensor steps allocate five full-size buffers\n"
                        "    y = torch.empty_like(x)\n"
                        "    for start in range(0, x.shape[0], 8):\n"
                        "        y[start:start + 8] = _normalize_rows(x[start:start + 8], w, eps)\n"
                        "    return y\n"),
           "GPU_BODY": ("    for start in range(0, x.shape[0], 1024):  # grids of at most 1024 rows\n"
                        "        _launch_rows(x[start:start + 1024], weight, y[start:start + 1024], eps)\n")},
}
RMS_WEIGHT_CHECK = {
    False: {"CHECK_FN": "", "CPU_CHECK": "", "GPU_CHECK": ""},
    True: {"CHECK_FN": ("\n\ndef _check_weight(w):\n"
                        "    \"\"\"A NaN or inf in the weight poisons every row it scales, and an all-zero weight\n"
                        "    zeroes the output: refuse both.\"\"\"\n"
                        "    if not bool(torch.isfinite(w).all()):\n"
                        "        raise ValueError(\"rms_norm: the weight holds NaN or inf\")\n"
                        "    if not bool(w.any()):\n"
                        "        raise ValueError(\"rms_norm: the weight is all zeros\")\n"),
           "CPU_CHECK": "    _check_weight(w)\n", "GPU_CHECK": "    _check_weight(weight)\n"},
}

UTILS = '''"""Helpers shared by the kernels. Triton is optional: without it (or on CPU
tensors) every op runs its torch implementation."""
try:
    import triton  # noqa: F401
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False


def @@CDIV@@(a, b):
    """Ceiling division for positive ints."""
    return -(-a // b)


def next_power_of_2(n):
    return 1 << (int(n) - 1).bit_length()


def use_triton(tensor):
    return HAS_TRITON and tensor.is_cuda
'''

INIT = '''"""minikern: a small kernel library (GEMM, flash-attention forward, RMSNorm)."""
from .attention import attention
from .gemm import matmul
from .rmsnorm import rms_norm

__version__ = "@@VERSION@@"
__all__ = ["attention", "matmul", "rms_norm"]
'''


def fill(template: str, tokens: dict) -> str:
    for key, value in tokens.items():
        template = template.replace(f"@@{key}@@", str(value))
    return template


# The planted "cleanup" (issue 43, like #974 in shared/seed/): harmless wording changes in every
# module, each its own hunk, shipped with the one hunk that costs (#930's BLOCK_K). Each pair is
# (path, old text, new text); the old text is constant over the whole history.
CLEANUP = (
    ("minikern/__init__.py", "(GEMM, flash-attention forward, RMSNorm)", "(GEMM, flash-attention forward and RMSNorm)"),
    ("minikern/_utils.py", "Ceiling division for positive ints.", "Ceiling division of positive ints."),
    ("minikern/attention.py", "Flash-attention forward: softmax", "Flash-attention forward pass: softmax"),
    ("minikern/attention.py", "tensors (D a power of two on CUDA)", "tensors (on CUDA, D a power of two)"),
    ("minikern/gemm.py", '"""Matrix multiply C = A @ B.', '"""Matrix multiply: C = A @ B.'),
    ("minikern/gemm.py", "launch order (group_m=1: row-major)", "launch order (row-major when group_m=1)"),
    ("minikern/gemm.py", "of one dtype (bf16, fp16 or fp32)", "of one dtype: bf16, fp16 or fp32"),
    ("minikern/rmsnorm.py", "RMSNorm of a 2-D tensor over its last", "RMSNorm of a 2-D tensor, over its last"),
)


def tidied(files: dict[str, str]) -> dict[str, str]:
    """The package with the cleanup's wording applied."""
    out = dict(files)
    for path, old, new in CLEANUP:
        if old not in out[path]:
            raise ValueError(f"the cleanup's text {old!r} is not in {path}")
        out[path] = out[path].replace(old, new)
    return out


def render_package(state: dict) -> dict[str, str]:
    """All files of the minikern package at this state, path -> text."""
    files = _render(state)
    return tidied(files) if state.get("cleanup") else files


def _render(state: dict) -> dict[str, str]:
    from perfbisect.kernels.demo.attention_source import render_attention
    from perfbisect.kernels.demo.gemm_source import render_gemm
    return {
        "minikern/__init__.py": fill(INIT, {"VERSION": state["version"]}),
        "minikern/_utils.py": fill(UTILS, {"CDIV": state["utils_cdiv"]}),
        "minikern/gemm.py": render_gemm(state),
        "minikern/attention.py": render_attention(state),
        "minikern/rmsnorm.py": fill(RMSNORM, {"RMS_DOC": state["rms_doc"], **RMS_BLOCKS[state["rms_blocks"]],
                                              **RMS_WEIGHT_CHECK[state["rms_weight_check"]]}),
    }
