"""The seed's suites: FlyDSL kernels on AMD Instinct, with aiter and hipBLASLt (through torch) as
controls measured in the same process. Written against the public APIs of FlyDSL
(kernels.attention.flash_attn_interface.flydsl_flash_attn_func,
kernels.gemm.preshuffle_gemm.compile_preshuffle_gemm, both in the FlyDSL repository being
bisected) and aiter (aiter.flash_attn_func, aiter.ops.shuffle.shuffle_weight, installed).

Importing this module needs neither torch, flydsl nor aiter (the service validates cases with it);
a trial on a host without ROCm and both packages stops with the reason ROCM_ONLY.

    flydsl_attention  B, H, S, D, causal   target e.g. kernels.attention.flash_attn_interface:flydsl_flash_attn_func
    flydsl_gemm       M, N, K, tile_m, tile_n, tile_k
                                            target e.g. kernels.gemm.preshuffle_gemm:compile_preshuffle_gemm
"""
from __future__ import annotations

import importlib.util
from typing import Any

from perfbisect.kernels.harness.devices import ROCM_ONLY
from perfbisect.kernels.suites.base import Suite, element_bytes, randn, torch_dtype

# The seed (MI355X, gfx950): bf16 non-causal attention at three sequence lengths, and the GEMM of
# the preshuffle tile regression with the tiles its table measured.
SEED_ATTENTION = [{"B": 2, "H": 32, "S": s, "D": 128, "causal": False, "dtype": "bf16"}
                  for s in (61_380, 180_180, 239_580)]
SEED_GEMM = [{"M": 54_560, "N": 8_192, "K": 8_192, "tile_m": m, "tile_n": n, "tile_k": k, "dtype": "bf16"}
             for m, n, k in ((128, 256, 256), (128, 128, 256), (64, 256, 256), (128, 256, 128), (128, 256, 64))]
FLYDSL_DTYPES = ("bf16", "fp16")
# The accuracy check covers these query rows (first and last) of the first and last (batch, head):
# an fp32 reference of every row at S=239,580 would cost more than the trial.
REF_ROWS = 256


class SuiteUnavailable(RuntimeError):
    """This host cannot run the suite (no ROCm torch, no flydsl or aiter)."""


def rocm_unavailable() -> str | None:
    """Why this process cannot run the FlyDSL suites, or None when it can."""
    import torch

    if not getattr(torch.version, "hip", None):
        return f"{ROCM_ONLY}: this torch is a {'CUDA' if torch.version.cuda else 'CPU'} build"
    missing = [name for name in ("flydsl", "aiter") if importlib.util.find_spec(name) is None]
    if missing:
        return f"{ROCM_ONLY}: {' and '.join(missing)} not importable"
    return None


class RocmSuite(Suite):
    """A suite that runs only under ROCm with flydsl and aiter (vendor "amd": the service refuses it
    for the cpu and cuda device classes)."""

    vendor = "amd"

    def validate(self, params):
        params = super().validate(params)
        if params["dtype"] not in FLYDSL_DTYPES:
            raise ValueError(f"{self.name}: dtype {params['dtype']} is not one of {', '.join(FLYDSL_DTYPES)}")
        return params

    def resolve_target(self, target: str):
        reason = rocm_unavailable()
        if reason:
            raise SuiteUnavailable(f"{self.name} {reason}")
        return super().resolve_target(target)

    def sample_rows(self, length: int) -> list[int]:
        rows = list(range(min(REF_ROWS, length)))
        return sorted(set(rows + list(range(max(0, length - REF_ROWS), length))))


class FlyDslAttentionSuite(RocmSuite):
    """Attention forward, [B, S, H, D] (FlyDSL's and aiter's BSHD layout); FLOPs 4*B*H*S^2*D
    (half when causal). Target called as target(q, k, v, causal=...); control aiter.flash_attn_func."""

    name = "flydsl_attention"
    shape_keys = ("B", "H", "S", "D")
    allowed_keys = ("dtype", "causal")

    def validate(self, params):
        params = super().validate(params)
        if params.get("causal", False) not in (True, False, 0, 1):
            raise ValueError(f"{self.name}: causal={params['causal']!r} must be true or false")
        params["causal"] = bool(params.get("causal", False))
        return params

    def make_inputs(self, params, device, gen):
        shape = (params["B"], params["S"], params["H"], params["D"])
        return tuple(randn(shape, torch_dtype(params), device, gen) for _ in range(3))

    def work(self, params) -> float:
        flops = 4.0 * params["B"] * params["H"] * params["S"] ** 2 * params["D"]
        return flops / 2 if params["causal"] else flops

    def footprint_bytes(self, params) -> int:
        return 4 * params["B"] * params["S"] * params["H"] * params["D"] * element_bytes(params)

    def call_target(self, fn, inputs, params):
        q, k, v = inputs
        return fn(q, k, v, causal=params["causal"])

    def control(self, inputs, params):
        import aiter

        q, k, v = inputs
        out = aiter.flash_attn_func(q, k, v, causal=params["causal"])
        return out[0] if isinstance(out, tuple) else out

    def _sampled(self, tensor, params):
        """[2 (batch, head) pairs, rows, D] of a [B, S, H, D] tensor: rows of sample_rows."""
        import torch

        rows = torch.tensor(self.sample_rows(params["S"]), device=tensor.device)
        pairs = [(0, 0), (params["B"] - 1, params["H"] - 1)]
        return torch.stack([tensor[b].index_select(0, rows)[:, h] for b, h in pairs])

    def check_output(self, out, inputs, params):
        import torch

        if not isinstance(out, torch.Tensor) or out.shape != inputs[0].shape:
            return out
        return self._sampled(out, params)

    def reference(self, inputs, params):
        """fp32 softmax(q k^T / sqrt(D)) v of the sampled rows against every key, in blocks."""
        import torch

        q, k, v = inputs
        rows = self.sample_rows(params["S"])
        pairs = [(0, 0), (params["B"] - 1, params["H"] - 1)]
        scale = params["D"] ** -0.5
        out = []
        for b, h in pairs:
            keys, values = k[b, :, h].float(), v[b, :, h].float()
            blocks = []
            for start in range(0, len(rows), REF_ROWS):
                index = torch.tensor(rows[start:start + REF_ROWS], device=q.device)
                scores = q[b].index_select(0, index)[:, h].float() @ keys.T * scale
                if params["causal"]:  # bottom-right aligned; Sq == Skv here, so the diagonal
                    cols = torch.arange(params["S"], device=q.device)[None, :]
                    scores = scores.masked_fill(cols > index[:, None], float("-inf"))
                blocks.append(torch.softmax(scores, dim=-1) @ values)
            out.append(torch.cat(blocks))
        return torch.stack(out)


class FlyDslGemmSuite(RocmSuite):
    """C = A @ W^T with W [N, K] preshuffled (aiter's shuffle_weight, layout (16, 16)) in the untimed
    setup; FLOPs 2*M*N*K. The target is FlyDSL's compile_preshuffle_gemm: its launcher is compiled
    for the case's tile shape on the first call and cached; control torch.matmul (hipBLASLt)."""

    name = "flydsl_gemm"
    shape_keys = ("M", "N", "K", "tile_m", "tile_n", "tile_k")

    def __init__(self):
        self.launchers: dict[tuple, Any] = {}

    def validate(self, params):
        params = super().validate(params)
        if params["K"] % params["tile_k"] or params["N"] % params["tile_n"]:
            raise ValueError(f"{self.name}: tile_k must divide K and tile_n must divide N "
                             f"(K={params['K']}, tile_k={params['tile_k']}, N={params['N']}, tile_n={params['tile_n']})")
        if params["N"] % 16 or params["K"] % 32:
            raise ValueError(f"{self.name}: the (16, 16) preshuffle needs N % 16 == 0 and K % 32 == 0")
        return params

    def make_inputs(self, params, device, gen):
        dtype = torch_dtype(params)
        return (randn((params["M"], params["K"]), dtype, device, gen),
                randn((params["N"], params["K"]), dtype, device, gen, scale=params["K"] ** -0.5))

    def setup(self, inputs, params):
        import torch
        from aiter.ops.shuffle import shuffle_weight

        a, w = inputs
        empty = torch.empty(0, dtype=torch.float32, device=a.device)
        # rows up to the last tile's end, as FlyDSL's own test allocates them: a ragged M (54,560 =
        # 426 x 128 + 32) writes its last tile through the buffer descriptor's bounds
        tiles = -(-params["M"] // params["tile_m"])
        out = torch.empty((tiles * params["tile_m"], params["N"]), dtype=a.dtype, device=a.device)[:params["M"]]
        return a, w, shuffle_weight(w, layout=(16, 16)), out, empty, torch.empty(0, dtype=a.dtype, device=a.device)

    def work(self, params) -> float:
        return 2.0 * params["M"] * params["N"] * params["K"]

    def footprint_bytes(self, params) -> int:
        m, n, k = params["M"], params["N"], params["K"]
        return (m * k + 2 * n * k + m * n) * element_bytes(params)

    def launcher(self, compile_fn, params):
        key = tuple(params[name] for name in ("N", "K", "tile_m", "tile_n", "tile_k", "dtype"))
        if key not in self.launchers:
            self.launchers[key] = compile_fn(N=params["N"], K=params["K"], tile_m=params["tile_m"],
                                             tile_n=params["tile_n"], tile_k=params["tile_k"],
                                             in_dtype=params["dtype"], out_dtype=params["dtype"])
        return self.launchers[key]

    def call_target(self, fn, inputs, params):
        import torch

        a, _, shuffled, out, empty, bias = inputs
        self.launcher(fn, params)(out.view(-1), a.view(-1), shuffled.view(-1), empty, empty, bias,
                                  params["M"], params["N"], torch.cuda.current_stream())
        return out

    def control(self, inputs, params):
        import torch

        a, w = inputs[:2]
        return torch.matmul(a, w.T)

    def check_output(self, out, inputs, params):
        import torch

        if not isinstance(out, torch.Tensor) or out.shape != (params["M"], params["N"]):
            return out
        return out[self.sample_rows(params["M"])]

    def reference(self, inputs, params):
        import torch

        a, w = inputs[:2]
        return a[self.sample_rows(params["M"])].double() @ w.double().T


ROCM_SUITES = {"flydsl_attention": FlyDslAttentionSuite, "flydsl_gemm": FlyDslGemmSuite}

