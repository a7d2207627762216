"""Source text of minikern/gemm.py at a given point of the demo history.

Tokens (@@NAME@@) are filled from the history state; each planted change flips one.
"""

GEMM = '''"""Matrix multiply C = A @ B.

On CUDA: a Triton kernel with a grouped ("L2-swizzled") launch order. GROUP_M row
blocks of C are computed one after another for each column block, so the B panel
they share is still in L2 when the next program needs it.

On the CPU: the same tiles in torch, walked in the same launch order. Consecutive
tiles that share a B column panel (a run down a column, which the grouped order
produces) are computed as one taller block against that panel, once it is packed:
the CPU's counterpart of the L2 reuse the launch order buys on the GPU. Tiles are
small and, as tl.dot does, multiplied in fp32 whatever the input dtype, so the cost
of a tile is its packing and launch-like overhead more than its FLOPs on any CPU
(with or without native bf16).
@@GEMM_DOC@@"""
from dataclasses import dataclass

import torch

from ._utils import HAS_TRITON, @@CDIV@@ as _cdiv, use_triton


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 1
    num_warps: int = 4
    num_stages: int = 3


# Tiles per dtype, tuned on Hopper.
CONFIGS = {
    torch.bfloat16: GemmConfig(128, 256, @@BF16_BLOCK_K@@, @@BF16_GROUP@@num_warps=8, num_stages=4),
    torch.float16: GemmConfig(128, 256, 64, group_m=8, num_warps=8, num_stages=4),
    torch.float32: GemmConfig(128, 128, 32, group_m=8, num_warps=8, num_stages=3),
}

# CPU tiles: C in 32 x 64 blocks, K in slabs of CPU_K_UNROLL * block_k.
CPU_BLOCK_M, CPU_BLOCK_N, CPU_K_UNROLL = 32, 64, 1


def tile_coords(pid, grid_m, grid_n, group_m):
    """Program id -> (pid_m, pid_n) in the grouped launch order (group_m=1: row-major)."""
    width = group_m * grid_n
    first_m = (pid // width) * group_m
    size_m = min(grid_m - first_m, group_m)
    return first_m + (pid % width) % size_m, (pid % width) // size_m


def column_runs(grid_m, grid_n, group_m):
    """Walk the launch order and yield (first_m, last_m, pid_n) for each run of
    consecutive tiles going down one column panel."""
    run = None
    for pid in range(grid_m * grid_n):
        pid_m, pid_n = tile_coords(pid, grid_m, grid_n, group_m)
        if run is not None and run[2] == pid_n and run[1] + 1 == pid_m:
            run[1] = pid_m
            continue
        if run is not None:
            yield tuple(run)
        run = [pid_m, pid_m, pid_n]
    if run is not None:
        yield tuple(run)


def _matmul_cpu(a, b, cfg):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid_m, grid_n = _cdiv(M, CPU_BLOCK_M), _cdiv(N, CPU_BLOCK_N)
    k_step = cfg.block_k * CPU_K_UNROLL
    k_tiles = @@CPU_K_TILES@@
    packed_n, b_panel = -1, None
    for first_m, last_m, pid_n in column_runs(grid_m, grid_n, cfg.group_m):
        rows = slice(first_m * CPU_BLOCK_M, (last_m + 1) * CPU_BLOCK_M)
        cols = slice(pid_n * CPU_BLOCK_N, (pid_n + 1) * CPU_BLOCK_N)
        if pid_n != packed_n:  # pack B's column panel once per run of tiles sharing it
            b_panel = b[:, cols].float()  # packed (contiguous, fp32) once per run
            packed_n = pid_n
        a_rows = a[rows].float()
        acc = torch.zeros((a_rows.shape[0], b_panel.shape[1]), device=a.device)
        for kt in range(k_tiles):
            k0 = kt * k_step
            acc += a_rows[:, k0:k0 + k_step] @ b_panel[k0:k0 + k_step]
        c[rows, cols] = acc
    return c


if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        grid_m = tl.cdiv(M, BLOCK_M)
        grid_n = tl.cdiv(N, BLOCK_N)
        width = GROUP_M * grid_n
        first_m = (pid // width) * GROUP_M
        size_m = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % width) % size_m
        pid_n = (pid % width) // size_m
        offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, @@GPU_K_TILES@@):
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _matmul_triton(a, b, cfg):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n),)
    _matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                         BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                         num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return c


@@SELF_CHECK@@def matmul(a, b):
    """C = A @ B for 2-D tensors of one dtype (bf16, fp16 or fp32)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: incompatible shapes {tuple(a.shape)} @ {tuple(b.shape)}")
    cfg = CONFIGS[a.dtype]
    if use_triton(a):
        return _matmul_triton(a, b, cfg)
@@CPU_RETURN@@'''


# The planted slow path (issue 46, `fp32_self_check`): the CPU path checks one fp32 call in
# SELF_CHECK_EVERY (4) against C recomputed tile by tile in float64, about twice the call's own
# cost (one float64 matmul through BLAS, 2.3x in all, sat within five robust widths of the calls'
# spread on a loaded 2-core machine, where the tail test cannot see it). Its float64 buffers are
# kept between checks: allocated and freed on every check, they made the control call that
# follows 2.3x noisier (3 trials a side, p 0.004), and the spread verdict withholds a step that
# the control shares; kept, 1.2x (p 0.03). The median
# of a trial's calls moves a few percent (far under the demo's 15% minimum effect); the calls
# become bimodal: a quarter of them about three times as slow. Counted per call, not drawn from the
# inputs: a trial's inputs are drawn once and every call sees the same ones (kernels/harness/
# trial.py), so a branch on their content would move whole trials, and the spread and mode
# verdicts read each trial's calls centred on its own median (service/bisect/spread.py).
SELF_CHECK = {
    False: {"SELF_CHECK": "", "CPU_RETURN": "    return _matmul_cpu(a, b, cfg)\n"},
    True: {"SELF_CHECK": ("SELF_CHECK_EVERY = 4  # CPU fp32 calls per float64 self-check\n"
                          "_calls = 0\n"
                          "_check_buffers = None  # float64 copies of A and B and the reference, kept between checks\n\n\n"
                          "def _self_check(a, b, c):\n"
                          "    \"\"\"Recompute C tile by tile in float64 and compare: a tile bug shows up on the\n"
                          "    machines that run minikern, not only in its tests.\"\"\"\n"
                          "    global _check_buffers\n"
                          "    if _check_buffers is None or _check_buffers[0].shape != a.shape or _check_buffers[1].shape != b.shape:\n"
                          "        _check_buffers = tuple(torch.empty(t.shape, dtype=torch.float64) for t in (a, b, c))\n"
                          "    a64, b64, ref = _check_buffers\n"
                          "    a64.copy_(a)\n"
                          "    b64.copy_(b)\n"
                          "    for i in range(0, a.shape[0], CPU_BLOCK_M):\n"
                          "        for j in range(0, b.shape[1], CPU_BLOCK_N):\n"
                          "            torch.matmul(a64[i:i + CPU_BLOCK_M], b64[:, j:j + CPU_BLOCK_N],\n"
                          "                         out=ref[i:i + CPU_BLOCK_M, j:j + CPU_BLOCK_N])\n"
                          "    scale = max(float(ref.abs().max()), 1e-30)\n"
                          "    err = float(ref.sub_(c).abs().max()) / scale\n"
                          "    if err > 1e-4:\n"
                          "        raise RuntimeError(f\"matmul: fp32 result off by {err:.2e} of its largest value\")\n\n\n"),
           "CPU_RETURN": ("    c = _matmul_cpu(a, b, cfg)\n"
                          "    if a.dtype == torch.float32:  # sampled: one call in SELF_CHECK_EVERY\n"
                          "        global _calls\n"
                          "        _calls += 1\n"
                          "        if _calls % SELF_CHECK_EVERY == 0:\n"
                          "            _self_check(a, b, c)\n"
                          "    return c\n")},
}


def render_gemm(state: dict) -> str:
    tail_ok = state["k_tail"]
    tokens = {
        "GEMM_DOC": state["gemm_doc"],
        "CDIV": state["gemm_cdiv"],
        "BF16_BLOCK_K": str(state["bf16_block_k"]),
        # the planted swizzle loss: group_m left out of the bf16 entry (defaults to 1)
        "BF16_GROUP": f"group_m={state['bf16_group_m']}, " if state["bf16_group_m"] > 1 else "",
        # the planted wrong-results bug: floor division drops the K tail
        "CPU_K_TILES": "_cdiv(K, k_step)" if tail_ok else "K // k_step",
        "GPU_K_TILES": "tl.cdiv(K, BLOCK_K)" if tail_ok else "K // BLOCK_K",
        **SELF_CHECK[state["fp32_self_check"]],
    }
    text = GEMM
    for key, value in tokens.items():
        text = text.replace(f"@@{key}@@", value)
    return text
