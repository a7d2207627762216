"""Per-call timers, cache flushers and the stopping rule (the clock readers are the vendors':
nvidia.py, amd.py).

The flush runs before every timed call and outside the timed region: on a GPU it writes twice
the total of every cache level the vendor's part has (NVIDIA: the L2; AMD Instinct: the per-XCD
L2s and the 256 MB Infinity Cache, devices.py), so no operand survives; on the CPU it touches a
buffer larger than the last-level cache, or, where that cache is larger than CPU_FLUSH_CAP_BYTES,
larger than the private caches (cpu_flush_bytes).
"""
from __future__ import annotations

import math
import os
import statistics
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

DEFAULT_LLC_BYTES = 64 << 20
# glibc malloc options (mallopt(3)): M_TRIM_THRESHOLD and M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
STEADY_MMAP_THRESHOLD = 256 << 20
STEADY_TRIM_THRESHOLD = 1 << 30
# Device-side spin before each timed GPU call: 400k cycles, about 0.2 ms at 2 GHz,
# longer than the launch overhead of a Python-launched Triton kernel.
SPIN_CYCLES = 400_000


# The CPU path stands in for a GPU in CI, on laptops and in the demo. A server part's shared L3
# can be hundreds of MiB (480 MiB on a 2-vCPU Xeon VM: flushing 1.5x of it is ~0.1 s per timed
# call, most of a trial). Above this cap the flush evicts the private caches only (cpu_flush_bytes).
# PERFBISECT_CPU_FLUSH_CAP_BYTES raises it.
CPU_FLUSH_CAP_BYTES = int(os.environ.get("PERFBISECT_CPU_FLUSH_CAP_BYTES", 64 << 20))


def cpu_flush_bytes() -> int:
    """The cache level the CPU flush evicts: the last level when it is within
    CPU_FLUSH_CAP_BYTES, else the largest level that is (the per-core L2).

    Where the last level is over the cap, a flush of 1.5x the cap (96 MiB, the rule before)
    evicted a varying part of it: on a 480 MiB L3 it cost 6-7 ms a flush, two a sample, about 1 s
    of a CPU demo trial's 1.46 s, and left each kernel's operands partly in the L3 and partly out
    of it. Flushing the L2 only (3 MiB) leaves them in the L3 every time: over 10 alternated
    fresh-process trials a side, the trial took 0.40 s, the demo's steps were the same (-43%
    against -36% on the bf16 gemm, -71% against -60% on RMSNorm, -51%/-44% against -49%/-41% on
    attention), and the trial-to-trial spread fell on 3 of 5 cases (on the fp32 gemm, where no
    step is planted, from 0.060 to 0.031, and its head step from -4.7% to -0.8%)
    (bench/RESULTS.md, seventeenth session)."""
    levels = cpu_cache_bytes()
    fitting = [size for size in levels if size <= CPU_FLUSH_CAP_BYTES]
    return max(fitting) if fitting else min(min(levels), CPU_FLUSH_CAP_BYTES)


def cpu_llc_bytes() -> int:
    """Largest cache size listed for cpu0 in sysfs, or 64 MiB when unreadable."""
    return max(cpu_cache_bytes())


CPU0_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def cpu_cache_bytes(root: Path = CPU0_CACHES) -> list[int]:
    """The sizes of cpu0's data and unified caches (one per level) from sysfs, smallest first;
    [64 MiB] when unreadable. Read once per process: a trial asks for them several times."""
    return list(_cache_sizes(root))


@lru_cache(maxsize=4)
def _cache_sizes(root: Path) -> tuple[int, ...]:
    sizes = set()
    for index in root.glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
            sizes.add(int(text.rstrip("KMG")) * mult)
        except (OSError, ValueError, IndexError):
            continue
    return tuple(sorted(sizes)) or (DEFAULT_LLC_BYTES,)


def cpu_clock(threads: int | None) -> str:
    """The clock a CPU trial times with: the calling thread's CPU time when torch runs on that one
    thread, the wall clock otherwise. On a loaded machine a single-threaded call is preempted now
    and then; wall time counts the wait, thread time does not (a neighbour's burst slowed the
    demo's Python-bound RMSNorm and not its BLAS control, so the ratio moved by the load: a
    planted -50% step read -1.5% in CI). Calls that sleep or wait on I/O are not what a CPU
    stand-in for a kernel does; a trial with more threads keeps the wall clock."""
    return "thread" if threads == 1 else "wall"


class CpuTimer:
    """The clock of `cpu_clock` around the call; the flush touches 1.5x the level of
    `cpu_flush_bytes` (read + write): the LLC, or the private caches where the LLC is over the cap.

    A read-only flush was tried (2026-12-03): it did not make the CPU demo's RMSNorm quieter
    once the trial's allocator was fixed (steady_host_allocator), so it was reverted
    (bench/RESULTS.md)."""

    kind = "cpu"

    def __init__(self, cold: bool, clock: str = "wall"):
        self.cache_bytes = cpu_flush_bytes()
        self.flush_buffer = torch.ones((self.cache_bytes * 3 // 2) // 4) if cold else None
        self.now = {"thread": time.thread_time, "wall": time.perf_counter}[clock]

    def flush(self) -> None:
        if self.flush_buffer is not None:
            self.flush_buffer.add_(1.0)

    def time_ms(self, fn: Callable[[], object]) -> float:
        self.flush()
        start = self.now()
        fn()
        return (self.now() - start) * 1e3


class CudaTimer:
    """CUDA (HIP) events around each call; the flush writes `flush_bytes` before the start event
    (by default twice torch's L2 size: right for NVIDIA, not for AMD's MALL, so the trial passes
    the device layer's figure)."""

    kind = "cuda"

    def __init__(self, cold: bool, device_index: int = 0, flush_bytes: int | None = None):
        props = torch.cuda.get_device_properties(device_index)
        self.cache_bytes = int(getattr(props, "L2_cache_size", 0)) or (50 << 20)
        self.flush_bytes = int(flush_bytes or 2 * self.cache_bytes)
        self.flush_buffer = (torch.empty(self.flush_bytes // 4, dtype=torch.int32, device="cuda")
                             if cold else None)
        self.spin_cycles = SPIN_CYCLES if hasattr(torch.cuda, "_sleep") else 0
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def flush(self) -> None:
        if self.flush_buffer is not None:
            self.flush_buffer.zero_()

    def time_ms(self, fn: Callable[[], object]) -> float:
        # Each sample starts on an idle GPU (the previous one was synchronised). Without
        # this, the start event fires while the CPU is still launching fn (Python and
        # Triton launch overhead, tens of microseconds) and that gap is timed. A short
        # device-side spin (nvbench's "blocking kernel") keeps the GPU busy until the
        # flush, the start event and fn are all queued.
        if self.spin_cycles:
            torch.cuda._sleep(self.spin_cycles)
        self.flush()
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return float(self.start.elapsed_time(self.end))


def relative_noise_of_median(samples: list[float]) -> float:
    """Standard error of the median (1.2533 sigma / sqrt(n)) relative to the median."""
    if len(samples) < 3:
        return math.inf
    median = statistics.median(samples)
    if median <= 0:
        return math.inf
    return 1.2533 * statistics.stdev(samples) / math.sqrt(len(samples)) / median


def should_stop(samples: list[float], elapsed_s: float, policy: dict) -> bool:
    """nvbench-style: at least min_samples, then stop when the median's relative noise is
    under rel_noise or the time cap is hit; never more than max_samples."""
    n = len(samples)
    if n >= policy["max_samples"]:
        return True
    if n < policy["min_samples"]:
        return elapsed_s > 10 * policy["max_time_s"]  # a very slow kernel still ends
    return relative_noise_of_median(samples) <= policy["rel_noise"] or elapsed_s >= policy["max_time_s"]


def steady_host_allocator() -> bool:
    """Keep the trial's host memory in its heap: blocks up to 256 MiB come from the heap, and
    freed memory is not handed back to the kernel below 1 GiB (glibc's mallopt; True when set).

    By default glibc serves a large block with a fresh mmap and adjusts that threshold as the
    process frees blocks, so whether a 4 MiB tensor lands on already-touched heap pages or on
    new pages that fault in one by one on every call depends on the process's allocation
    history. Measured on the CPU demo's RMSNorm (1024x1024 fp32): torch's rms_norm took 1.6 ms
    with 0 page faults a call in one process and 7-10 ms with 2,016 in another (a child forked
    by the fork server), so its control swung 0.27-2.7x between trials. Fixed thresholds make
    every trial the same. A no-op off glibc."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, STEADY_MMAP_THRESHOLD)
                    and libc.mallopt(_M_TRIM_THRESHOLD, STEADY_TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False

