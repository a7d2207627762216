"""RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * w.

Memory-bound, so the metric is GB/s of the bytes that must move (read x and w,
write y). Control: torch's own rms_norm.
"""
from __future__ import annotations

from perfbisect.kernels.suites.base import Suite, element_bytes, randn, torch_dtype

EPS = 1e-6


def torch_rms_norm(x, weight, eps):
    import torch

    fn = getattr(torch.nn.functional, "rms_norm", None)
    if fn is not None:
        return fn(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


class RmsNormSuite(Suite):
    name = "rmsnorm"
    metric_name = "GB/s"
    shape_keys = ("M", "N")

    def make_inputs(self, params, device, gen):
        import torch

        dtype = torch_dtype(params)
        x = randn((params["M"], params["N"]), dtype, device, gen)
        # weights around 1 but not all ones, so a kernel that ignores them is caught
        w = (1.0 + 0.1 * randn((params["N"],), torch.float32, device, gen)).to(dtype)
        return x, w, EPS

    def work(self, params) -> float:
        return float(element_bytes(params) * (2 * params["M"] * params["N"] + params["N"]))

    def footprint_bytes(self, params) -> int:
        # x and y [M, N], the weight [N]
        return (2 * params["M"] * params["N"] + params["N"]) * element_bytes(params)

    def control(self, inputs, params):
        return torch_rms_norm(*inputs)

    def reference(self, inputs, params):
        import torch

        x, w, eps = inputs
        xd = x.to(torch.float64)
        return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.to(torch.float64)
