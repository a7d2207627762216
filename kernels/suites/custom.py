"""Custom suites from a Python file: inside the repository ('file:bench/ln_bwd.py'), or kept
outside it and sent with the job ('source:ln_bwd.py@<sha256 prefix>'), then imported from the
trial's own directory at every revision, with the revision's import root on sys.path.

The file follows the same protocol as the built-in suites, as module-level names:

    METRIC = "TFLOP/s", "GB/s", or a unit of its own ("kcall/s", "items/s")
                                           (optional: TFLOP/s with flops, GB/s with bytes_moved)
    METRIC_SCALE = 1e3                     (optional: work per second / METRIC_SCALE = the metric;
                                            known units scale themselves, others default to 1)
    HIGHER_IS_BETTER = True                (optional)
    TOLERANCE = 1e-2                       (optional, else per dtype)
    def validate(params) -> dict           (optional; raise ValueError)
    def make_inputs(params, device, generator) -> tuple        (required)
    def setup(inputs, params) -> tuple     (optional, untimed: e.g. a forward pass)
    def flops(params) / bytes_moved(params) / work(params) -> float   (one required)
    def reference(inputs, params) -> the expected output       (required; any type)
    def control(inputs, params)                                (required)
    def compare(output, reference, params) -> float            (optional: the error, passed
                                           when <= TOLERANCE; default: tensors by relative
                                           Frobenius error, numbers, sequences and dicts
                                           element-wise, anything else by ==)
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
WORK_FUNCTIONS = ("flops", "bytes_moved", "work")


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
        if not any(hasattr(module, fn) for fn in WORK_FUNCTIONS):
            missing.append("flops, bytes_moved or work")
        if missing:
            raise ValueError(f"custom suite {name}: missing {', '.join(missing)}")
        self.name = name
        self.module = module
        default_metric = "TFLOP/s" if hasattr(module, "flops") else "GB/s" if hasattr(module, "bytes_moved") else None
        self.metric_name = getattr(module, "METRIC", default_metric)
        if self.metric_name is None:
            raise ValueError(f"custom suite {name}: a suite that counts `work` must name its unit in METRIC "
                             "(e.g. METRIC = 'kcall/s' with METRIC_SCALE = 1e3)")
        scale = getattr(module, "METRIC_SCALE", None)
        self.metric_scale = float(scale) if scale is not None else None
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
        fn = next(getattr(self.module, name) for name in WORK_FUNCTIONS if hasattr(self.module, name))
        return float(fn(params))

    def call_target(self, fn, inputs, params):
        hook = getattr(self.module, "call_target", None)
        return hook(fn, inputs, params) if hook else fn(*inputs)

    def control(self, inputs, params):
        return self.module.control(inputs, params)

    def reference(self, inputs, params):
        return self.module.reference(inputs, params)

    def compare(self, out, ref, params):
        hook = getattr(self.module, "compare", None)
        return float(hook(out, ref, params)) if hook else super().compare(out, ref, params)

    def tolerance(self, params):
        if hasattr(self.module, "TOLERANCE"):
            return float(self.module.TOLERANCE)
        return DEFAULT_TOLERANCE.get(params.get("dtype", "fp32"), 2e-3)

    def resolve_target(self, target):
        hook = getattr(self.module, "resolve_target", None)
        return hook(target) if hook else super().resolve_target(target)
