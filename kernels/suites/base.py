"""The suite protocol shared by the built-in suites and custom suite files.

A suite knows how to make inputs for a case, count its work (FLOPs or bytes), call a
target with the suite's calling convention, run the vendor control, and compute a
reference in higher precision for the accuracy check.

torch is imported inside the functions that run a case, never at import: the service validates
suites and shapes (and the CLI starts) without loading torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Mapping

from perfbisect.kernels.cases import canonical_dtype

if TYPE_CHECKING:
    import torch

# Bytes per element of each canonical dtype (footprints are checked without torch).
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}

# Divisors from work per second to the metrics whose unit says the scale.
UNIT_SCALE = {"TFLOP/s": 1e12, "GFLOP/s": 1e9, "GB/s": 1e9, "TB/s": 1e12, "MB/s": 1e6}

# Relative Frobenius error allowed per dtype. fp32 allows for tf32 tensor-core dots
# (Triton's default for fp32 on NVIDIA GPUs, about 3e-4).
DEFAULT_TOLERANCE = {"fp32": 2e-3, "fp16": 1e-2, "bf16": 2e-2, "fp64": 1e-9}


def torch_dtype(params: Mapping[str, Any]) -> torch.dtype:
    import torch

    return getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}[
        canonical_dtype(params.get("dtype", "bf16"))])


def resolve_callable(ref: str) -> Callable:
    """Import 'package.module:attr.path'. Import errors propagate (the caller reports them)."""
    module_name, sep, attr_path = ref.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"target {ref!r} must look like 'package.module:function'")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"{ref} is not callable")
    return obj


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf for a wrong shape or any NaN/inf."""
    import torch

    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(ref.shape):
        return float("inf")
    diff = out.detach().to(torch.float64) - ref.to(torch.float64)
    err = (diff.norm() / ref.to(torch.float64).norm().clamp_min(1e-300)).item()
    return err if err == err and err != float("inf") else float("inf")


def output_error(out: Any, ref: Any, _depth: int = 0) -> float:
    """The default accuracy check, for outputs of any common type: tensors by relative_error;
    real or complex numbers by |out - ref| / |ref|; tuples and lists element by element (the
    largest error; inf on a length mismatch); dicts key by key (inf on other keys); anything else
    by ==, 0.0 when equal, else inf. A suite whose outputs need another notion of "the same
    result" (a symbolic expression up to simplification, a float within an absolute bound)
    defines `compare`."""
    import torch

    if isinstance(ref, torch.Tensor):
        return relative_error(out, ref)
    if isinstance(ref, (int, float, complex)) and not isinstance(ref, bool):
        if not isinstance(out, (int, float, complex)) or isinstance(out, bool):
            return float("inf")
        err = abs(out - ref) / max(abs(ref), 1e-300)
        return err if err == err else float("inf")
    if _depth < 32 and isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            return float("inf")
        return max((output_error(o, r, _depth + 1) for o, r in zip(out, ref)), default=0.0)
    if _depth < 32 and isinstance(ref, dict):
        if not isinstance(out, dict) or out.keys() != ref.keys():
            return float("inf")
        return max((output_error(out[k], ref[k], _depth + 1) for k in ref), default=0.0)
    try:
        return 0.0 if bool(out == ref) else float("inf")
    except Exception:  # an == that raises or returns something with no truth value
        return float("inf")


def require_positive_ints(params: Mapping[str, Any], keys: tuple[str, ...], suite: str) -> None:
    for key in keys:
        if key not in params:
            raise ValueError(f"{suite}: missing parameter {key!r} (needs {', '.join(keys)})")
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{suite}: parameter {key}={value!r} must be a positive integer")


class Suite:
    """Base of the built-in suites; custom files are wrapped to look the same."""

    name = "suite"
    metric_name = "TFLOP/s"       # or "GB/s", or any unit a suite declares ("kcall/s", "items/s")
    metric_scale: float | None = None   # work / seconds / scale = the metric; None: by the unit
    higher_is_better = True
    shape_keys: tuple[str, ...] = ()
    allowed_keys: tuple[str, ...] = ("dtype",)

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Return normalised params; raise ValueError with a message for bad ones."""
        params = dict(params)
        unknown = sorted(set(params) - set(self.shape_keys) - set(self.allowed_keys))
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}; "
                             f"expected {', '.join(self.shape_keys + self.allowed_keys)}")
        require_positive_ints(params, self.shape_keys, self.name)
        params["dtype"] = canonical_dtype(params.get("dtype", "bf16"))
        return params

    def make_inputs(self, params, device: str, gen: torch.Generator) -> tuple:
        raise NotImplementedError

    def setup(self, inputs: tuple, params) -> tuple:
        """Untimed per-case preparation (e.g. a forward pass feeding a timed backward)."""
        return inputs

    def work(self, params) -> float:
        """The work of one call in the metric's unit before scaling: FLOPs (TFLOP/s), bytes
        moved (GB/s), or whatever the suite counts (1 call for calls/s)."""
        raise NotImplementedError

    def footprint_bytes(self, params) -> int | None:
        """Bytes of the case's inputs and output on the device (the service refuses cases over
        its memory limit before any trial runs); None when the suite cannot tell."""
        return None

    def metric(self, params, ms: float) -> float:
        return self.work(params) / (ms * 1e-3) / self.scale() if ms > 0 else float("nan")

    def scale(self) -> float:
        """The divisor from work per second to the metric: 1e12 for TFLOP/s, 1e9 for GB/s,
        `metric_scale` when the suite sets one, else 1 (a unit of its own, per second)."""
        if self.metric_scale is not None:
            return float(self.metric_scale)
        return UNIT_SCALE.get(self.metric_name, 1.0)

    def call_target(self, fn: Callable, inputs: tuple, params):
        return fn(*inputs)

    def control(self, inputs: tuple, params):
        raise NotImplementedError

    def reference(self, inputs: tuple, params) -> torch.Tensor:
        raise NotImplementedError

    def check_output(self, out, inputs: tuple, params) -> torch.Tensor:
        """The part of the output the reference covers (all of it, by default)."""
        return out

    def compare(self, out, ref, params) -> float:
        """The output's error against the reference, passed when <= tolerance (output_error)."""
        return output_error(out, ref)

    def tolerance(self, params) -> float:
        return DEFAULT_TOLERANCE[params.get("dtype", "bf16")]

    def resolve_target(self, target: str) -> Callable:
        return resolve_callable(target)


def element_bytes(params: Mapping[str, Any]) -> int:
    return ELEMENT_BYTES[canonical_dtype(params.get("dtype", "bf16"))]


def randn(shape, dtype: torch.dtype, device: str, gen: torch.Generator, scale: float = 1.0):
    """Random normal inputs from the trial's generator (on the device), never zeros."""
    import torch

    x = torch.randn(shape, generator=gen, dtype=torch.float32, device=device)
    if scale != 1.0:
        x.mul_(scale)
    return x.to(dtype=dtype)
