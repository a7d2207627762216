"""`perfbisect suite check`: run one call of each function of a custom suite file and explain
every contract violation in one line, before a bisect spends hours on a suite that cannot work.

    python -m perfbisect.kernels.suites.check FILE --shape M=64,N=64 [--target mod:fn]

Runs the file's code (a user's own file, on their machine, from the CLI): in a child process of
the CLI, with the revision under test first on sys.path. Prints one JSON line per check
({"check", "ok", "detail"}) so the CLI words them; exits 0 whatever it found.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str


def _describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')} on {value.device.type}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_describe(v) for v in value[:4])
        return f"{type(value).__name__}({inner}{', ...' if len(value) > 4 else ''})"
    return type(value).__name__


def _step(name: str, fn: Callable[[], Any], describe: Callable[[Any], str] = _describe) -> tuple[Finding, Any]:
    try:
        value = fn()
    except Exception as exc:  # the user's code: any failure is a finding, never a traceback
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return Finding(name, False, f"raised {text}"), None
    return Finding(name, True, describe(value)), value


def check_suite(path: Path, shape: dict, target: str | None, device: str = "cpu") -> Iterator[Finding]:
    """Every check of the suite protocol in order; stops where a later check needs a value that
    an earlier one could not make. Touches only what the file's own functions touch."""
    import torch

    from perfbisect.kernels.suites.custom import CustomSuite, import_suite_file

    found, module = _step("import", lambda: import_suite_file(path), lambda m: f"imported {path.name}")
    yield found
    if module is None:
        return
    found, suite = _step("protocol", lambda: CustomSuite(path.stem, module),
                         lambda s: f"metric {s.metric_name}, {'higher' if s.higher_is_better else 'lower'} is better")
    yield found
    if suite is None:
        return
    yield _preload_finding(path)
    found, params = _step("validate", lambda: suite.validate(shape), lambda p: f"params {p}")
    yield found
    if params is None:
        return
    work_found, work = _step("work", lambda: suite.work(params), lambda w: f"{w:g} per call")
    if work is not None and not (math.isfinite(work) and work > 0):
        work_found = Finding("work", False, f"returned {work!r}: the work of one call must be a positive number")
    yield work_found
    gen = torch.Generator(device=device).manual_seed(0)
    found, inputs = _step("make_inputs", lambda: tuple(suite.make_inputs(params, device, gen)))
    yield found
    if inputs is None:
        return
    found, prepared = _step("setup", lambda: suite.setup(inputs, params))
    yield found
    if prepared is None:
        return
    yield _step("control", lambda: suite.control(prepared, params))[0]  # only timed, never compared
    found, reference = _step("reference", lambda: suite.reference(prepared, params))
    yield found
    if target is None:
        yield Finding("target", True, "skipped: no --target given")
        return
    found, fn = _step("resolve_target", lambda: suite.resolve_target(target), lambda f: f"{target} is callable")
    yield found
    if fn is None:
        return
    found, out = _step("call_target", lambda: suite.call_target(fn, prepared, params))
    yield found
    if out is not None and reference is not None:
        yield _compared("target vs reference", suite, out, reference, params, prepared)


def _preload_finding(path: Path) -> Finding:
    """PRELOAD as the worker reads it (a literal list, without running the file), and whether
    each module imports here, with the seconds it took: what every trial saves."""
    from perfbisect.kernels.harness.preload import declared_preload, import_preloaded

    try:
        names = declared_preload(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        return Finding("preload", False, f"{exc}: the worker reads it without running the file")
    if not names:
        return Finding("preload", True, "none declared (PRELOAD = [...] for a library that is slow to import)")
    started = time.perf_counter()
    loaded, failed = import_preloaded(names)
    if failed:
        name, why = next(iter(failed.items()))
        return Finding("preload", False, f"{name} does not import: {why.splitlines()[0][:200]}")
    return Finding("preload", True, f"{', '.join(loaded)} imported in {time.perf_counter() - started:.2f} s")


def _compared(name: str, suite, out, reference, params, inputs) -> Finding:
    found, error = _step(name, lambda: suite.compare(suite.check_output(out, inputs, params), reference, params),
                         lambda e: f"error {e:.3g}")
    if error is None:
        return found
    tolerance = suite.tolerance(params)
    if not error <= tolerance:
        why = ("the outputs differ in type or structure, or compare() found them unequal: define "
               "compare(output, reference, params) for outputs that are not tensors, numbers or sequences"
               if math.isinf(error) else f"above the tolerance {tolerance:.3g} (set TOLERANCE)")
        return Finding(name, False, f"error {error:.3g}: {why}")
    return Finding(name, True, f"error {error:.3g} within tolerance {tolerance:.3g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfbisect.kernels.suites.check")
    parser.add_argument("file", type=Path)
    parser.add_argument("--shape", required=True)
    parser.add_argument("--target")
    args = parser.parse_args(argv)
    from perfbisect.kernels.cases import parse_shape

    for finding in check_suite(args.file.resolve(), parse_shape(args.shape), args.target):
        print(json.dumps(asdict(finding)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
