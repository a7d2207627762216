"""GEMM: C = A @ B. FLOPs 2*M*N*K; control torch.matmul (cuBLAS on NVIDIA GPUs; on a CPU,
half-precision inputs are multiplied by the fp32 BLAS: a CPU without bf16/fp16 instructions
emulates them some 30x slower and less steadily, which would make the control the slowest and
noisiest part of a trial)."""
from __future__ import annotations

from perfbisect.kernels.suites.base import Suite, element_bytes, randn, torch_dtype


class GemmSuite(Suite):
    name = "gemm"
    shape_keys = ("M", "N", "K")

    def make_inputs(self, params, device, gen):
        dtype = torch_dtype(params)
        a = randn((params["M"], params["K"]), dtype, device, gen)
        b = randn((params["K"], params["N"]), dtype, device, gen)
        return a, b

    def work(self, params) -> float:
        return 2.0 * params["M"] * params["N"] * params["K"]

    def footprint_bytes(self, params) -> int:
        m, n, k = params["M"], params["N"], params["K"]
        return (m * k + k * n + m * n) * element_bytes(params)

    def control(self, inputs, params):
        import torch

        a, b = inputs
        if a.device.type == "cpu" and a.dtype in (torch.bfloat16, torch.float16):
            return torch.matmul(a.float(), b.float()).to(a.dtype)
        return torch.matmul(a, b)

    def reference(self, inputs, params):
        import torch

        a, b = inputs
        # fp64 on the CPU is slow for big shapes and tf32 would be too coarse: use
        # float64 everywhere, on the inputs' device (H200 fp64 is fast enough).
        return torch.matmul(a.to(torch.float64), b.to(torch.float64))
