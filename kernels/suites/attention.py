"""Attention forward: softmax(Q K^T * D^-0.5) V for [B, H, S, D] tensors.

FLOPs 4*B*H*S^2*D (two matmuls), half when causal. Control: torch's
scaled_dot_product_attention. The target is called as target(q, k, v, causal).
"""
from __future__ import annotations

from perfbisect.kernels.suites.base import Suite, element_bytes, randn, torch_dtype

# The reference covers at most this many (batch, head) pairs, in query blocks, so the
# accuracy check of a 16k-long sequence does not need an S x S fp64 matrix per head.
REF_HEADS = 2
REF_QUERY_BLOCK = 1024


class AttentionSuite(Suite):
    name = "attention"
    shape_keys = ("B", "H", "S", "D")
    allowed_keys = ("dtype", "causal")

    def validate(self, params):
        params = super().validate(params)
        causal = params.get("causal", False)
        if causal not in (True, False, 0, 1):
            raise ValueError(f"attention: causal={causal!r} must be true or false")
        params["causal"] = bool(causal)
        return params

    def make_inputs(self, params, device, gen):
        dtype = torch_dtype(params)
        shape = (params["B"], params["H"], params["S"], params["D"])
        return tuple(randn(shape, dtype, device, gen) for _ in range(3))

    def work(self, params) -> float:
        flops = 4.0 * params["B"] * params["H"] * params["S"] ** 2 * params["D"]
        return flops / 2 if params["causal"] else flops

    def footprint_bytes(self, params) -> int:
        # q, k, v and the output, all [B, H, S, D]
        return 4 * params["B"] * params["H"] * params["S"] * params["D"] * element_bytes(params)

    def call_target(self, fn, inputs, params):
        return fn(*inputs, params["causal"])

    def control(self, inputs, params):
        import torch

        q, k, v = inputs
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=params["causal"])

    def check_output(self, out, inputs, params):
        import torch

        if not isinstance(out, torch.Tensor) or out.shape != inputs[0].shape:
            return out
        return out.flatten(0, 1)[:REF_HEADS]

    def reference(self, inputs, params):
        import torch

        q, k, v = (t.flatten(0, 1)[:REF_HEADS] for t in inputs)
        # fp64 for fp32 inputs, fp32 (ample against bf16/fp16 tolerances) otherwise
        hi = torch.float64 if q.dtype in (torch.float32, torch.float64) else torch.float32
        q, k, v = q.to(hi), k.to(hi), v.to(hi)
        scale = q.shape[-1] ** -0.5
        out = torch.empty_like(q)
        seq = q.shape[1]
        for start in range(0, seq, REF_QUERY_BLOCK):
            stop = min(seq, start + REF_QUERY_BLOCK)
            scores = q[:, start:stop] @ k.transpose(-1, -2) * scale
            if params["causal"]:
                rows = torch.arange(start, stop, device=q.device)[:, None]
                cols = torch.arange(seq, device=q.device)[None, :]
                scores = scores.masked_fill(cols > rows, float("-inf"))
            out[:, start:stop] = torch.softmax(scores, dim=-1) @ v
        return out
