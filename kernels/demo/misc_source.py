"""Source text of minikern's small modules (RMSNorm, helpers, package init)."""

RMSNORM = '''"""RMSNorm over the last dimension: y = x * rsqrt(mean(x^2) + eps) * w.
@@RMS_DOC@@"""
import torch

from ._utils import HAS_TRITON, next_power_of_2, use_triton


def _rms_norm_cpu(x, weight, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype)


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


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm of a 2-D tensor over its last dimension."""
    if not use_triton(x):
        return _rms_norm_cpu(x, weight, eps)
    x = x.contiguous()
    y = torch.empty_like(x)
    M, N = x.shape
    block = next_power_of_2(N)
    _rms_norm_kernel[(M,)](x, weight, y, N, x.stride(0), eps, BLOCK_N=block,
                           num_warps=min(16, max(4, block // 512)))
    return y
'''

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


def render_package(state: dict) -> dict[str, str]:
    """All files of the minikern package at this state, path -> text."""
    from perfbisect.kernels.demo.attention_source import render_attention
    from perfbisect.kernels.demo.gemm_source import render_gemm
    return {
        "minikern/__init__.py": fill(INIT, {"VERSION": state["version"]}),
        "minikern/_utils.py": fill(UTILS, {"CDIV": state["utils_cdiv"]}),
        "minikern/gemm.py": render_gemm(state),
        "minikern/attention.py": render_attention(state),
        "minikern/rmsnorm.py": fill(RMSNORM, {"RMS_DOC": state["rms_doc"]}),
    }
