"""One trial, inside the child process: resolve targets, then for every case make the inputs,
call the target once (it compiles; its output is kept for the accuracy check), warm up, time
target and control interleaved (ABAB) until the stopping rule says enough, and only then check
accuracy against the reference (off the path to the first sample; cached per revision and
seed, refcache.py). Failures become data in the result, never exceptions."""
from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path

import torch

from perfbisect.kernels.cases import case_name
from perfbisect.kernels.harness.devices import CACHE_OVERRIDE_ENV
from perfbisect.kernels.harness.jitcache import FLYDSL_DUMP_DIR, flydsl_dump_env, read_cache, read_flydsl
from perfbisect.kernels.harness.imports import worktree_imports
from perfbisect.kernels.harness.phases import PhaseClock
from perfbisect.kernels.harness.profiling import live_triton, profile_case
from perfbisect.kernels.harness.provenance import describe_device, open_clock
from perfbisect.kernels.harness.refcache import ReferenceCache
from perfbisect.kernels.harness.result import HARNESS_VERSION, SCHEMA_ID, failure_result, fingerprint_basis
from perfbisect.kernels.harness.timing import CpuTimer, CudaTimer, should_stop, steady_host_allocator
from perfbisect.kernels.suites import get_suite
from perfbisect.kernels.suites.base import resolve_callable

DEFAULT_POLICY = {"min_samples": 10, "max_samples": 50, "max_time_s": 2.0, "rel_noise": 0.01,
                  "warmup": 3, "throttle_fraction": 0.75, "balance_factor": 5.0}
MAX_REPEATS = 64
MAX_MESSAGE = 4000


def describe_exception(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."


def is_compile_error(exc: BaseException) -> bool:
    """Triton raises CompilationError / OutOfResources (shared memory, registers)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    module = type(exc).__module__ or ""
    return bool(names & {"CompilationError", "OutOfResources"}) or module.startswith("triton.compiler")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _finite_or_none(value: float) -> float | None:
    return value if isinstance(value, float) and math.isfinite(value) else None


def resolve_targets(spec: dict, repo_root: Path) -> list[tuple]:
    """(case, suite, params, callable) per case. Import failures of a target propagate;
    unknown suites and bad params raise ValueError."""
    prepared = []
    source_files = spec.get("suite_files") or {}  # sha256 -> path, written by the parent (runner.py)
    for case in spec["cases"]:
        suite = get_suite(case["suite"], repo_root, source_file=source_files.get(case.get("source")))
        params = suite.validate(case.get("params", {}))
        fn = suite.resolve_target(case["target"])
        if case.get("adapter"):
            # an adapter bridges a target whose signature changed across history
            fn = resolve_callable(case["adapter"])(fn)
        prepared.append((case, suite, params, fn))
    return prepared


def measure_case(case, suite, params, fn, timer, clock, policy, seed, device,
                 phases: PhaseClock, references: ReferenceCache) -> dict:
    entry = _error_case(case, suite, params)
    entry.update(status="ok", clock_mhz=[] if clock.available else None)
    with phases.track("inputs_reference"):
        gen = torch.Generator(device=device).manual_seed(seed)
        inputs = suite.setup(suite.make_inputs(params, device, gen), params)

    def run_target():
        return suite.call_target(fn, inputs, params)

    def run_control():
        return suite.control(inputs, params)

    try:  # the first call compiles (JIT) and is also the accuracy sample
        with phases.track("compile"):
            checked = _kept_output(suite, run_target(), inputs, params)
            _sync(device)
    except Exception as exc:
        entry["status"] = "compile_error" if is_compile_error(exc) else "error"
        entry["error"] = describe_exception(exc)
        return entry
    if policy.get("profile"):  # a culprit's evidence (issue 43): profiled, never timed nor checked
        with phases.track("timing"):
            entry["profile"] = profile_case(run_target, device)
        return entry
    accuracy_only = bool(policy.get("accuracy_only"))  # a correctness sweep: no timing loop
    if not accuracy_only:
        with phases.track("timing"):
            _time_samples(entry, run_target, run_control, timer, clock, policy, device, phases)
    # The reference (float64) comes after timing, off the path to the first sample, and
    # from the revision's cache when this revision and seed were checked before.
    with phases.track("inputs_reference"):
        reference = references.get_or_compute(case["suite"], params, seed, inputs,
                                               lambda: suite.reference(inputs, params))
        error = suite.compare(checked, reference, params)
    entry["accuracy_error"] = _finite_or_none(error)
    if not error <= entry["tolerance"] and entry["status"] == "ok":
        # a fast kernel that computes the wrong thing is a failure, whatever its speed
        entry["status"] = "wrong_results"
        entry["error"] = f"relative error {error:.3g} above tolerance {entry['tolerance']:.3g}"
    if not accuracy_only:
        _summarise(entry, suite, params)
    return entry


def _kept_output(suite, out, inputs, params):
    """The part of the first output the accuracy check compares, kept until the reference
    is ready after timing (a copy when it is a slice, so the full output is freed)."""
    checked = suite.check_output(out, inputs, params)
    if isinstance(checked, torch.Tensor) and isinstance(out, torch.Tensor) and checked.numel() < out.numel():
        checked = checked.clone()
    return checked


def balanced_repeats(target_ms: float, control_ms: float, factor: float) -> tuple[int, int]:
    """How many calls of (target, control) make one sample: one each, unless one call takes more
    than `factor` times the other; then the faster is called about as many times as it takes to
    fill the slower one's window (at most MAX_REPEATS), so both sides of every ratio see the same
    stretch of the machine. A 20 ms target against a 0.4 ms control otherwise compares each
    target call with a control call that saw 2% of the load the target saw."""
    if not (target_ms > 0 and control_ms > 0) or factor <= 0:
        return 1, 1
    ratio = target_ms / control_ms
    if ratio > factor:
        return 1, min(MAX_REPEATS, round(ratio))
    if 1 / ratio > factor:
        return min(MAX_REPEATS, round(1 / ratio)), 1
    return 1, 1


def _timed(timer, fn, repeats: int) -> float:
    """The median of `repeats` timed calls (each cold when the timer flushes): a median, not a
    mean, so that a sample of k calls estimates what a sample of one does (the median over
    samples is then the same quantity whether a revision needed repeats or not)."""
    return statistics.median(timer.time_ms(fn) for _ in range(repeats))


def _time_samples(entry, run_target, run_control, timer, clock, policy, device, phases) -> None:
    """Warm up, then time target and control interleaved (ABAB) until the stopping rule; the
    warm-up's own times choose the repeats that balance the two sides (balanced_repeats)."""
    warm_t, warm_c = [], []
    for _ in range(policy["warmup"]):
        warm_t.append(timer.time_ms(run_target))
        warm_c.append(timer.time_ms(run_control))
    _sync(device)
    t_reps, c_reps = balanced_repeats(_median(warm_t) or 0.0, _median(warm_c) or 0.0,
                                      float(policy.get("balance_factor") or 0))
    entry["repeats"] = {"target": t_reps, "control": c_reps}
    started = time.perf_counter()
    while True:
        phases.mark_first_sample()
        t_ms = _timed(timer, run_target, t_reps)
        t_mhz = clock.read_mhz()
        c_ms = _timed(timer, run_control, c_reps)
        c_mhz = clock.read_mhz()
        fraction = policy["throttle_fraction"]
        if clock.throttled(t_mhz, fraction) or clock.throttled(c_mhz, fraction):
            entry["dropped_throttled"] += 1
        else:
            entry["target_ms"].append(t_ms)
            entry["control_ms"].append(c_ms)
            entry["ratio"].append(c_ms / t_ms if t_ms > 0 else float("nan"))
            if entry["clock_mhz"] is not None:
                entry["clock_mhz"].append(t_mhz)
        elapsed = time.perf_counter() - started
        if should_stop(entry["target_ms"], elapsed, policy):
            return
        if entry["dropped_throttled"] > policy["max_samples"]:
            if len(entry["target_ms"]) < policy["min_samples"]:
                entry["status"] = "error"
                entry["error"] = (f"{entry['dropped_throttled']} samples taken throttled (SM clock "
                                  f"under {fraction:.0%} of {clock.max_mhz:g} MHz), too few left")
            return


def _summarise(entry: dict, suite, params) -> None:
    t_med, c_med = _median(entry["target_ms"]), _median(entry["control_ms"])
    entry["median_target_ms"], entry["median_control_ms"] = t_med, c_med
    entry["median_ratio"] = _median(entry["ratio"])
    if t_med:
        entry["metric"]["target"] = suite.metric(params, t_med)
    if c_med:
        entry["metric"]["control"] = suite.metric(params, c_med)


def run_trial(spec: dict, repo_root: Path, phases: PhaseClock | None = None) -> dict:
    """Run every case of the spec in this process and return the result dict; `phases`
    collects where the time went."""
    started = time.perf_counter()
    steady_host_allocator()
    phases = phases or PhaseClock()
    policy = {**DEFAULT_POLICY, **(spec.get("policy") or {})}
    policy["accuracy_only"] = bool(spec.get("accuracy_only"))  # no warm-up, no timing loop
    if spec.get("profile"):  # a profiled trial: kernels and compiled code, no timing (issue 43)
        policy["profile"] = True
        os.environ.update(flydsl_dump_env(tempfile.mkdtemp(prefix="perfbisect-flydsl-ir-")))
    cold = bool(spec.get("cold", True))
    # Fresh random inputs per trial unless the caller pins the seed (recorded either way).
    seed = int(spec["seed"]) if spec.get("seed") is not None else int.from_bytes(os.urandom(4), "little")
    device = spec.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        return failure_result("error", "device 'cuda' requested but torch sees no CUDA device",
                              describe_device("cpu"), cold=cold)
    threads = None
    if device == "cpu":
        # One thread by default: on a small shared machine, a multi-threaded region waits
        # for its slowest thread, and a neighbour's process makes that slow at random.
        threads = int(policy.get("threads", 1))
        torch.set_num_threads(threads)
    if spec.get("gpu_caches"):  # the worker's PERFBISECT_GPU_CACHES (the sandbox passes no PERFBISECT_*)
        os.environ[CACHE_OVERRIDE_ENV] = str(spec["gpu_caches"])
    with phases.track("import"):  # the device context: CUDA's starts here
        info = describe_device(device, threads)
    try:
        with phases.track("import"):
            prepared = resolve_targets(spec, repo_root)
    except (ImportError, SyntaxError, AttributeError) as exc:
        return failure_result("import_error", describe_exception(exc), info,
                              time.perf_counter() - started, cold)
    except Exception as exc:
        return failure_result("error", describe_exception(exc), info,
                              time.perf_counter() - started, cold)

    with phases.track("timing"):
        timer = (CudaTimer(cold, flush_bytes=info.get("flush_bytes")) if device == "cuda"
                 else CpuTimer(cold, info["clock"]))
        clock = open_clock(device)
        if clock.available:  # clock, temperature, power, throttles: before and after the cases
            info["telemetry"] = {"start": clock.telemetry()}
    cache = spec.get("reference_cache") or {}
    references = ReferenceCache(cache.get("dir"), cache.get("revision"))
    cases = []
    for index, (case, suite, params, fn) in enumerate(prepared):
        try:
            cases.append(measure_case(case, suite, params, fn, timer, clock, policy,
                                      seed + index, device, phases, references))
        except Exception as exc:
            cases.append({**_error_case(case, suite, params), "error": describe_exception(exc)
                          + "\n" + traceback.format_exc(limit=3)})
        if device == "cuda":
            torch.cuda.empty_cache()
    if clock.available:
        info["telemetry"]["end"] = clock.telemetry()
    extra = {"evidence": compiled_evidence(repo_root)} if policy.get("profile") else {}
    return {**extra, "schema": SCHEMA_ID, "harness_version": HARNESS_VERSION, "status": "ok", "error": None,
            "device": info, "fingerprint_basis": fingerprint_basis(info, cold), "cases": cases,
            "seed": seed, "policy": policy, "reference_cache": references.stats(),
            "imported": worktree_imports(repo_root),  # the files hunk localization searches
            "wall_s": round(time.perf_counter() - started, 3)}


def compiled_evidence(repo_root: Path) -> dict:
    """A profiled trial's compiled code: its JIT cache's kernels (jitcache.py) and what the live
    Triton objects say (the autotuner's choices, registers, spills, specialisation)."""
    cache, dumps, fly_cache = (os.environ.get(key) for key in ("TRITON_CACHE_DIR", FLYDSL_DUMP_DIR,
                                                                "FLYDSL_RUNTIME_CACHE_DIR"))
    try:
        compiled = read_cache(Path(cache) if cache else None)
        flydsl = read_flydsl(Path(dumps) if dumps else None, Path(fly_cache) if fly_cache else None)
        if flydsl:  # FlyDSL's kernels beside Triton's (jitcache.py says how they are read)
            compiled = {"kernels": compiled["kernels"] + flydsl, "note": None}
        return {"compiled": compiled, "live": live_triton(repo_root)}
    except Exception as exc:  # evidence is an extra: never a failed trial
        return {"compiled": {"kernels": [], "note": f"reading the JIT cache failed: {describe_exception(exc)}"},
                "live": {"autotune": [], "kernels": [], "note": None}}


def _error_case(case, suite, params) -> dict:
    return {"suite": case["suite"], "target": case["target"], "params": params,
            "name": case_name(case["suite"], params), "status": "error", "error": None,
            "target_ms": [], "control_ms": [], "ratio": [], "clock_mhz": None,
            "dropped_throttled": 0,
            "metric": {"name": suite.metric_name, "higher_is_better": suite.higher_is_better,
                       "target": None, "control": None},
            "median_target_ms": None, "median_control_ms": None, "median_ratio": None,
            "accuracy_error": None, "tolerance": suite.tolerance(params)}
