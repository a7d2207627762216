"""Custom suites from a Python file: inside the repository ('file:bench/ln_bwd.py'), or kept
outside it and sent with the job ('source:ln_bwd.py@<sha256 prefix>'), then imported from the
trial's own directory at every revision, with the revision's import root on sys.path.

The file follows the same protocol as the built-in suites, as module-level names:

    METRIC = "TFLOP/s" or "GB/s"           (optional, default TFLOP/s)
    HIGHER_IS_BETTER = True                (optional)
    TOLERANCE = 1e-2                       (optional, else per dtype)
    def validate(params) -> dict           (optional; raise ValueError)
    def make_inputs(params, device, generator) -> tuple        (required)
    def setup(inputs, params) -> tuple     (optional, untimed: e.g. a forward pass)
    def flops(params) / bytes_moved(params) -> float           (one required)
    def reference(inputs, params) -> Tensor                    (required)
    def control(inputs, params) -> Tensor                      (required)
    def call_target(fn, inputs, params)    (optional; default fn(*inputs))
    def resolve_target(target: str)        (optional; default import 'module:function')
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from perfbisect.kernels.cases import canonical_dtype
from perfbisect.kernels.suites.base import DEFAULT_TOLERANCE, Suite

REQUIRED = ("make_inputs", "reference", "control")


def load_suite_file(repo_root: Path, relpath: str) -> ModuleType:
    """Import a suite file that must lie inside repo_root. Raises ValueError otherwise."""
    root = Path(repo_root).resolve()
    path = (root / relpath).resolve()
    if Path(relpath).is_absolute() or root not in path.parents:
        raise ValueError(f"custom suite {relpath!r} must be a path inside the repository")
    if not path.is_file():
        raise ValueError(f"custom suite file {relpath!r} not found in the repository")
    return import_suite_file(path)


def import_suite_file(path: Path) -> ModuleType:
    """Import a suite file by path (its code runs: only in a trial's process)."""
    spec = importlib.util.spec_from_file_location(f"perfbisect_suite_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CustomSuite(Suite):
    """Adapts a suite module to the Suite interface."""

    def __init__(self, name: str, module: ModuleType):
        missing = [fn for fn in REQUIRED if not hasattr(module, fn)]
        if not (hasattr(module, "flops") or hasattr(module, "bytes_moved")):
            missing.append("flops or bytes_moved")
        if missing:
            raise ValueError(f"custom suite {name}: missing {', '.join(missing)}")
        self.name = name
        self.module = module
        default_metric = "TFLOP/s" if hasattr(module, "flops") else "GB/s"
        self.metric_name = getattr(module, "METRIC", default_metric)
        self.higher_is_better = getattr(module, "HIGHER_IS_BETTER", True)

    def validate(self, params):
        params = dict(params)
        if "dtype" in params:
            params["dtype"] = canonical_dtype(params["dtype"])
        hook = getattr(self.module, "validate", None)
        return dict(hook(params)) if hook else params

    def make_inputs(self, params, device, gen):
        return tuple(self.module.make_inputs(params, device, gen))

    def setup(self, inputs, params):
        hook = getattr(self.module, "setup", None)
        return tuple(hook(inputs, params)) if hook else inputs

    def work(self, params):
        fn = getattr(self.module, "flops", None) or self.module.bytes_moved
        return float(fn(params))

    def call_target(self, fn, inputs, params):
        hook = getattr(self.module, "call_target", None)
        return hook(fn, inputs, params) if hook else fn(*inputs)

    def control(self, inputs, params):
        return self.module.control(inputs, params)

    def reference(self, inputs, params):
        return self.module.reference(inputs, params)

    def tolerance(self, params):
        if hasattr(self.module, "TOLERANCE"):
            return float(self.module.TOLERANCE)
        return DEFAULT_TOLERANCE.get(params.get("dtype", "fp32"), 2e-3)

    def resolve_target(self, target):
        hook = getattr(self.module, "resolve_target", None)
        return hook(target) if hook else super().resolve_target(target)
