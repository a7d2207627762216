"""The profiled trial of a culprit's end (issue 43): which kernels ran, and what compiled them.

A profiled trial never times anything: per case it calls the target once (it compiles), calls it
again for WARMUP_S unprofiled (the GPU leaves its idle clocks), then under torch.profiler (CUDA
kernels on a GPU, operators on the CPU) at least PROFILED_CALLS times and for PROFILED_MIN_S, at
most MAX_PROFILED_CALLS, and tabulates what ran per call: a kernel's time per call is its median
launch times its launches per call, so a launch slowed by a clock ramp or a co-tenant does not
move it (five launches of a 30 us kernel, one of them at idle clocks, hid #930's step). After the cases it reads the trial's JIT cache (jitcache.py) and the
live Triton objects of the measured repository: the autotuner's chosen configuration per key,
and each compiled kernel's registers, spills and constexpr specialisation.

    table = kernel_table(trace_events, calls=5, device="cuda")     # pure: recorded traces test it
    entry = profile_case(run_target, device)                        # {"kernels": [...], "calls": n, "note": ...}
    found = live_triton(repo_root)                                  # {"autotune": [...], "kernels": [...]}

Failures are notes ("the profiler failed: ..."), never exceptions: evidence is an extra.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

PROFILED_CALLS = 5          # at least this many profiled target calls
PROFILED_MIN_S = 0.05       # and at least this long (short kernels get more calls) ...
MAX_PROFILED_CALLS = 200    # ... but never more calls than this (the trace stays small)
WARMUP_S = 0.1              # unprofiled calls first, off the GPU's idle clocks
MAX_ROWS = 40
_SKIP_CATEGORIES = {"user_annotation", "gpu_user_annotation", "python_function", "Trace", "overhead"}


def _device_rows(events: list[dict]) -> list[dict]:
    """GPU kernels (and device copies/fills, as the profiler names them) with their launch geometry."""
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def _self_times(events: list[dict]) -> list[tuple[dict, float]]:
    """CPU operators with their self time (their duration less that of the operators nested in
    them on the same thread), so a wrapper (`aten::linear`) does not double what it calls."""
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e.get("pid"), e.get("tid"), float(e.get("ts", 0)), -float(e.get("dur", 0))))
    out: list[list] = []
    stacks: dict[tuple, list[list]] = defaultdict(list)
    for event in ops:
        start, dur = float(event.get("ts", 0)), float(event.get("dur", 0))
        stack = stacks[(event.get("pid"), event.get("tid"))]
        while stack and float(stack[-1][0].get("ts", 0)) + float(stack[-1][0].get("dur", 0)) <= start:
            stack.pop()
        if stack:
            stack[-1][1] -= dur
        row = [event, dur]
        stack.append(row)
        out.append(row)
    return [(event, max(0.0, self_us)) for event, self_us in out]


def kernel_table(events: list[dict], calls: int, device: str) -> list[dict]:
    """Per kernel (GPU) or operator (CPU, self time): name, calls, total, mean and median time in
    ms, the time per profiled target call (median launch x launches per call), and the grid/block the profiler recorded (GPU; the most
    frequent). Sorted by total time, the first MAX_ROWS. `events`: a Chrome trace's traceEvents."""
    rows: dict[str, dict] = {}
    timed = ([(e, float(e.get("dur", 0))) for e in _device_rows(events)] if device != "cpu"
             else _self_times(events))
    for event, dur_us in timed:
        if event.get("cat") in _SKIP_CATEGORIES or str(event.get("name", "")).startswith("ProfilerStep"):
            continue
        row = rows.setdefault(event["name"], {"name": event["name"], "calls": 0, "total_us": 0.0,
                                              "durations": [], "geometry": defaultdict(int)})
        row["calls"] += 1
        row["total_us"] += dur_us
        row["durations"].append(dur_us)
        args = event.get("args") or {}
        if "grid" in args or "block" in args:
            row["geometry"][(json.dumps(args.get("grid")), json.dumps(args.get("block")))] += 1
    table = []
    for row in rows.values():
        grid = block = None
        if row["geometry"]:
            grid, block = (json.loads(x) for x in max(row["geometry"].items(), key=lambda kv: kv[1])[0])
        total_ms = row["total_us"] / 1000.0
        median_ms = statistics.median(row["durations"]) / 1000.0
        # per target call: the median launch times launches per call (robust to one slow launch)
        table.append({"name": row["name"], "calls": row["calls"], "total_ms": round(total_ms, 6),
                      "mean_ms": round(total_ms / row["calls"], 6), "median_ms": round(median_ms, 6),
                      "per_call_ms": round(median_ms * row["calls"] / max(1, calls), 6),
                      "launches_per_call": round(row["calls"] / max(1, calls), 3),
                      "grid": grid, "block": block})
    table.sort(key=lambda r: -r["total_ms"])
    return table[:MAX_ROWS]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def profiled_calls(run_target: Callable[[], object], device: str) -> int:
    """Warm up for WARMUP_S (at least one call), then the number of calls to profile: enough for
    PROFILED_MIN_S at the warm call's time, between PROFILED_CALLS and MAX_PROFILED_CALLS."""
    start = time.perf_counter()
    warm = 0
    while warm < 1 or time.perf_counter() - start < WARMUP_S:
        run_target()
        _sync(device)
        warm += 1
    per_call = (time.perf_counter() - start) / warm
    wanted = math.ceil(PROFILED_MIN_S / per_call) if per_call > 0 else MAX_PROFILED_CALLS
    return max(PROFILED_CALLS, min(MAX_PROFILED_CALLS, wanted))


def profile_case(run_target: Callable[[], object], device: str, calls: int | None = None) -> dict:
    """Run the (already compiled) target under torch.profiler and tabulate what ran: `calls`
    times, or (None) after a warm-up as many times as profiled_calls says.
    Returns {"kernels": table, "calls": calls, "note": None}, or an empty table with the reason."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if calls is None:
        try:
            calls = profiled_calls(run_target, device)
        except Exception as exc:  # the target failed outside the profiler: a note, as below
            return {"kernels": [], "calls": 0, "note": f"the warm-up call failed: {type(exc).__name__}: {exc}"[:500]}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    handle, path = tempfile.mkstemp(suffix=".json", prefix="perfbisect-trace-")
    os.close(handle)
    try:
        with profile(activities=activities) as prof:
            for _ in range(calls):
                run_target()
            if device == "cuda":
                torch.cuda.synchronize()
        prof.export_chrome_trace(path)
        events = json.loads(Path(path).read_text()).get("traceEvents", [])
    except Exception as exc:  # a profiler that fails is a note, never a failed trial
        return {"kernels": [], "calls": calls, "note": f"the profiler failed: {type(exc).__name__}: {exc}"[:500]}
    finally:
        Path(path).unlink(missing_ok=True)
    table = kernel_table(events, calls, device)
    note = None if table else ("the profiler recorded no GPU kernel" if device == "cuda"
                               else "the profiler recorded no operator")
    return {"kernels": table, "calls": calls, "note": note}


def _repo_modules(repo_root: Path) -> list:
    """The loaded modules whose file lies in the measured repository."""
    root = str(Path(repo_root).resolve())
    found = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if path and os.path.abspath(path).startswith(root + os.sep):
            found.append(module)
    return found


def _config_text(config) -> dict:
    """A triton.Config as plain data: its kwargs (the meta-parameters) and launch options."""
    out = {"kwargs": {k: _plain(v) for k, v in (getattr(config, "kwargs", None) or {}).items()}}
    for key in ("num_warps", "num_stages", "num_ctas", "maxnreg", "num_buffers_warp_spec"):
        if getattr(config, key, None) is not None:
            out[key] = _plain(getattr(config, key))
    return out


def _plain(value):
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def _jit_of(obj):
    """The JITFunction under autotuner/heuristics wrappers (their `.fn` chain)."""
    seen = 0
    while hasattr(obj, "fn") and seen < 8 and not hasattr(obj, "device_caches"):
        obj, seen = obj.fn, seen + 1
    return obj


def _compiled_of(jit) -> list:
    """Compiled kernels a JITFunction holds (Triton 3.x: device_caches[device][0] is key -> kernel;
    older: cache[device])."""
    caches = getattr(jit, "device_caches", None)
    if isinstance(caches, dict):
        return [k for entry in caches.values() for k in (entry[0] if isinstance(entry, tuple) else entry).values()]
    cache = getattr(jit, "cache", None)
    return [k for per_device in cache.values() for k in per_device.values()] if isinstance(cache, dict) else []


def _constant_names(src) -> dict:
    """The constexpr specialisation by argument name: Triton 3.3+ keys `constants` by argument
    index paths ((3,): 32), older releases by name or index."""
    constants = dict(getattr(src, "constants", None) or {})
    names = list(getattr(getattr(src, "fn", None), "arg_names", None) or [])

    def name_of(key):
        index = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        return names[index] if isinstance(index, int) and 0 <= index < len(names) else str(key)
    return {name_of(k): _plain(v) for k, v in constants.items()}


def _kernel_facts(kernel) -> dict:
    meta = getattr(kernel, "metadata", None)
    name = getattr(meta, "name", None) or getattr(kernel, "name", None)
    facts = {"name": name, "hash": getattr(meta, "hash", None),
             "constants": _constant_names(getattr(kernel, "src", None))}
    for key in ("n_regs", "n_spills", "n_max_threads"):
        value = getattr(kernel, key, None)
        if isinstance(value, int):
            facts[key] = value
    return facts


def live_triton(repo_root: Path) -> dict:
    """What the measured repository's Triton objects hold after the trial: per autotuned kernel,
    the configuration chosen per key (shape), and per compiled kernel its registers, spills and
    constexpr specialisation. Empty (with a note) when Triton is not loaded."""
    if "triton" not in sys.modules:
        return {"autotune": [], "kernels": [], "note": "Triton is not loaded in this trial"}
    autotune, kernels, seen = [], [], set()
    for module in _repo_modules(repo_root):
        for attr in list(vars(module).values()):
            if id(attr) in seen or not (hasattr(attr, "fn") or hasattr(attr, "device_caches")):
                continue
            seen.add(id(attr))
            try:
                chosen = getattr(attr, "cache", None)
                if hasattr(attr, "configs") and isinstance(chosen, dict):
                    autotune.append({"kernel": getattr(_jit_of(attr), "__name__", str(attr)),
                                     "configs": len(attr.configs),
                                     "chosen": {str(key): _config_text(cfg) for key, cfg in chosen.items()}})
                kernels += [_kernel_facts(k) for k in _compiled_of(_jit_of(attr))]
            except Exception:  # a wrapper of another shape: skip it, evidence is an extra
                continue
    return {"autotune": autotune, "kernels": kernels, "note": None}
