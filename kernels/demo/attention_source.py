"""Source text of minikern/attention.py at a given point of the demo history.

`exp_mode` is the planted knob:
  "exp2"    fast path: log2(e) folded into the softmax scale, exp2 (GPU); scale folded
            into Q once, fp32 exp (CPU). The original code.
  "precise" fast math dropped: the score tile scaled separately, then libdevice's
            precise exp (GPU); scores and exp in fp64 (CPU).
"""

ATTENTION = '''"""Flash-attention forward: softmax(Q K^T * scale) V, tiled over keys with an
online softmax, for [B, H, S, D] tensors. Triton on CUDA, torch on the CPU.
@@ATTN_DOC@@"""
import math

import torch

from ._utils import HAS_TRITON, @@CDIV@@ as _cdiv, use_triton

LOG2E = 1.4426950408889634
BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES = 128, 64, 8, 3
CPU_BLOCK_N = 128


def _attention_cpu(q, k, v, causal, sm_scale):
    B, H, S, D = q.shape
    out_dtype = q.dtype
    q, k, v = q.float(), k.float(), v.float()
    m_i = torch.full((B, H, S), -math.inf, device=q.device)
    l_i = torch.zeros((B, H, S), device=q.device)
    acc = torch.zeros((B, H, S, D), device=q.device)
@@CPU_PROLOGUE@@
    rows = torch.arange(S, device=q.device)[:, None]
    for blk in range(_cdiv(S, CPU_BLOCK_N)):
        start = blk * CPU_BLOCK_N
        kt = k[:, :, start:start + CPU_BLOCK_N].transpose(-1, -2)
        vb = v[:, :, start:start + CPU_BLOCK_N]
@@CPU_SCORES@@
        if causal:
            cols = torch.arange(start, start + kt.shape[-1], device=q.device)[None, :]
            s.masked_fill_(cols > rows, -math.inf)
        m_new = torch.maximum(m_i, s.amax(-1))
@@CPU_EXP@@
        l_i = l_i * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + p @ vb
        m_i = m_new
    return (acc / l_i[..., None]).to(out_dtype)


if HAS_TRITON:
    import triton
    import triton.language as tl
@@GPU_IMPORTS@@
    @triton.jit
    def _attn_fwd(Q, K, V, O, sm_scale, S, stride_bh, stride_s,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, EVEN_N: tl.constexpr@@GPU_PARAMS@@):
        start_m = tl.program_id(0)
        base = tl.program_id(1).to(tl.int64) * stride_bh
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + base + offs_m[:, None] * stride_s + offs_d[None, :],
                    mask=offs_m[:, None] < S, other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
@@GPU_PROLOGUE@@
        hi = tl.minimum(S, (start_m + 1) * BLOCK_M) if CAUSAL else S
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(K + base + cols[None, :] * stride_s + offs_d[:, None],
                        mask=cols[None, :] < S, other=0.0)
@@GPU_SCORES@@
            if CAUSAL:
                qk = tl.where(offs_m[:, None] >= cols[None, :], qk, float("-inf"))
            if not EVEN_N:
                qk = tl.where(cols[None, :] < S, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
@@GPU_EXP@@
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + base + cols[:, None] * stride_s + offs_d[None, :],
                        mask=cols[:, None] < S, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        acc = acc / l_i[:, None]
        tl.store(O + base + offs_m[:, None] * stride_s + offs_d[None, :],
                 acc.to(O.dtype.element_ty), mask=offs_m[:, None] < S)


def _attention_triton(q, k, v, causal, sm_scale):
    B, H, S, D = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    _attn_fwd[grid](q, k, v, o, sm_scale, S, S * D, D, HEAD_DIM=D, BLOCK_M=BLOCK_M,
                    BLOCK_N=BLOCK_N, CAUSAL=causal, EVEN_N=S % BLOCK_N == 0,@@GPU_ARGS@@
                    num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return o


def attention(q, k, v, causal=False, sm_scale=None):
    """Attention forward for [B, H, S, D] tensors (D a power of two on CUDA)."""
    if sm_scale is None:
        sm_scale = q.shape[-1] ** -0.5
    if use_triton(q):
        return _attention_triton(q, k, v, bool(causal), sm_scale)
    return _attention_cpu(q, k, v, bool(causal), sm_scale)
'''

_VARIANTS = {
    "exp2": {
        "CPU_PROLOGUE": "    q = q * sm_scale  # fold the scale into Q once: no pass over the score tile",
        "CPU_SCORES": "        s = q @ kt",
        "CPU_EXP": ("        p = torch.exp(s - m_new[..., None])\n"
                    "        alpha = torch.exp(m_i - m_new)"),
        "GPU_IMPORTS": "",
        "GPU_PROLOGUE": ("        # exp(x * scale) == exp2(x * scale * log2(e)): fold log2(e) into the scale\n"
                         "        # so the softmax runs on the fast ex2 unit with one multiply\n"
                         "        qk_scale = sm_scale * 1.4426950408889634"),
        "GPU_SCORES": "            qk = tl.dot(q, k) * qk_scale",
        "GPU_EXP": ("            p = tl.math.exp2(qk - m_new[:, None])\n"
                    "            alpha = tl.math.exp2(m_i - m_new)"),
    },
    "precise": {
        "CPU_PROLOGUE": "",
        "CPU_SCORES": ("        # scores and exp in float64, for parity with the reference implementation\n"
                       "        s = (q.double() @ kt.double()) * sm_scale"),
        "CPU_EXP": ("        p = torch.exp(s - m_new[..., None]).float()\n"
                    "        alpha = torch.exp(m_i - m_new)"),
        "GPU_IMPORTS": "    from triton.language.extra import libdevice\n",
        "GPU_PROLOGUE": "",
        "GPU_SCORES": "            qk = tl.dot(q, k) * sm_scale",
        "GPU_EXP": ("            # precise exp, for parity with the reference implementation\n"
                    "            p = libdevice.exp(qk - m_new[:, None])\n"
                    "            alpha = libdevice.exp(m_i - m_new)"),
    },
}


# minicc's choice (kernels/demo/minicc.py), read when minikern is imported; a checkout without its
# pinned minicc takes the precise path, as the pin it bumps to does.
_VARIANTS["minicc"] = {
    "CPU_PROLOGUE": ("    fast = FASTMATH\n"
                     "    if fast:\n"
                     "        q = q * sm_scale  # fold the scale into Q once: no pass over the score tile"),
    "CPU_SCORES": "        s = q @ kt if fast else (q.double() @ kt.double()) * sm_scale",
    "CPU_EXP": ("        p = torch.exp(s - m_new[..., None]).float()\n"
                "        alpha = torch.exp(m_i - m_new)"),
    "GPU_IMPORTS": "    from triton.language.extra import libdevice\n",
    "GPU_PARAMS": ", FAST: tl.constexpr",
    "GPU_ARGS": " FAST=FASTMATH,",
    "GPU_PROLOGUE": ("        if FAST:  # exp2 with log2(e) folded into the scale (minicc's fast path)\n"
                     "            qk_scale = sm_scale * 1.4426950408889634\n"
                     "        else:\n"
                     "            qk_scale = sm_scale"),
    "GPU_SCORES": "            qk = tl.dot(q, k) * qk_scale",
    "GPU_EXP": ("            if FAST:\n"
                "                p = tl.math.exp2(qk - m_new[:, None])\n"
                "                alpha = tl.math.exp2(m_i - m_new)\n"
                "            else:\n"
                "                p = libdevice.exp(qk - m_new[:, None])\n"
                "                alpha = libdevice.exp(m_i - m_new)"),
}
MINICC_IMPORT = """
try:
    from minicc import FASTMATH  # the pinned code generator (minicc.pin), placed at minicc/
except ImportError:
    FASTMATH = False
"""


def render_attention(state: dict) -> str:
    tokens = {"GPU_PARAMS": "", "GPU_ARGS": "", **_VARIANTS[state["exp_mode"]], "ATTN_DOC": state["attn_doc"],
              "CDIV": state["attn_cdiv"]}
    text = ATTENTION
    if state["exp_mode"] == "minicc":
        text = text.replace("\nLOG2E = ", MINICC_IMPORT + "\nLOG2E = ", 1)
    for key, value in tokens.items():
        text = text.replace(f"@@{key}@@", value)
    # an empty token leaves a blank line; drop lines that hold only whitespace twice
    return text.replace("\n\n\n\n", "\n\n\n")
