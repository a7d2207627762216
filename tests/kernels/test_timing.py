"""The stopping rule, the throttle rule and the cache sizes, on literal samples."""
from __future__ import annotations

import math
import platform
import subprocess
import sys
import threading

import pytest

from perfbisect.kernels.harness import timing
from perfbisect.kernels.harness.timing import (
    CPU_FLUSH_CAP_BYTES,
    CpuTimer,
    cpu_cache_bytes,
    cpu_clock,
    cpu_flush_bytes,
    cpu_llc_bytes,
    relative_noise_of_median,
    should_stop,
)
from perfbisect.kernels.harness.nvidia import NvidiaClock

POLICY = {"min_samples": 5, "max_samples": 20, "max_time_s": 1.0, "rel_noise": 0.01}


def test_stops_when_the_median_is_precise_enough():
    steady = [1.0, 1.001, 0.999, 1.0, 1.002]
    assert relative_noise_of_median(steady) < 0.01
    assert should_stop(steady, elapsed_s=0.1, policy=POLICY)


def test_keeps_sampling_noisy_data_until_the_time_cap_or_max_samples():
    noisy = [1.0, 1.5, 0.7, 1.3, 0.9]
    assert relative_noise_of_median(noisy) > 0.01
    assert not should_stop(noisy, elapsed_s=0.1, policy=POLICY)
    assert should_stop(noisy, elapsed_s=1.5, policy=POLICY)
    assert should_stop(noisy * 4, elapsed_s=0.1, policy=POLICY)


def test_min_samples_come_first_unless_the_kernel_is_very_slow():
    assert not should_stop([1.0, 1.0], elapsed_s=2.0, policy=POLICY)
    assert should_stop([1.0, 1.0], elapsed_s=11.0, policy=POLICY)
    assert math.isinf(relative_noise_of_median([1.0, 1.0]))


def test_throttled_samples_are_those_under_the_fraction_of_the_max_clock():
    clock = NvidiaClock(enabled=False)
    assert not clock.available and clock.read_mhz() is None and not clock.throttled(100.0)
    clock.nvml, clock.max_mhz = object(), 1980.0
    assert clock.throttled(1480.0) and not clock.throttled(1490.0)
    assert not clock.throttled(1480.0, fraction=0.7)


def test_cpu_flush_buffer_is_larger_than_the_level_it_flushes():
    llc = cpu_llc_bytes()
    assert llc >= 1 << 20
    timer = CpuTimer(cold=True)
    level = cpu_flush_bytes()
    assert level in cpu_cache_bytes() and level <= CPU_FLUSH_CAP_BYTES
    assert timer.flush_buffer.numel() * 4 == level * 3 // 2 // 4 * 4
    assert CpuTimer(cold=False).flush_buffer is None
    assert timer.time_ms(lambda: sum(range(1000))) > 0


@pytest.mark.parametrize("levels, flushed", [
    ([48 << 10, 2 << 20, 480 << 20], 2 << 20),   # a 480 MiB L3 over the 64 MiB cap: the L2 only
    ([32 << 10, 1 << 20, 32 << 20], 32 << 20),   # a 32 MiB L3 under it: the whole LLC, as always
    ([32 << 10, 1 << 20, 64 << 20], 64 << 20),   # at the cap exactly
    ([512 << 20], 64 << 20),                     # no level under the cap: the cap
])
def test_the_cpu_flush_evicts_the_largest_level_under_the_cap(monkeypatch, levels, flushed):
    monkeypatch.setattr(timing, "cpu_cache_bytes", lambda: levels)
    monkeypatch.setattr(timing, "CPU_FLUSH_CAP_BYTES", 64 << 20)
    assert timing.cpu_flush_bytes() == flushed and timing.cpu_llc_bytes() == max(levels)


def test_cpu_cache_sizes_leave_out_instruction_caches(tmp_path):
    for index, (kind, size) in enumerate([("Data", "48K"), ("Instruction", "64K"), ("Unified", "2048K"),
                                          ("Unified", "491520K")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "type").write_text(kind + "\n")
        (folder / "size").write_text(size + "\n")
    assert cpu_cache_bytes(tmp_path) == [48 << 10, 2 << 20, 480 << 20]
    assert cpu_cache_bytes(tmp_path / "absent") == [timing.DEFAULT_LLC_BYTES]


def test_a_single_threaded_cpu_trial_times_the_thread_not_the_wait():
    """On a loaded machine a one-thread call is preempted; its thread clock does not count the
    time it waited, so the ratio to the control does not move with a neighbour's load. A blocked
    call is the extreme case: it waits the whole time and the thread clock reads ~0."""
    assert cpu_clock(1) == "thread" and cpu_clock(2) == "wall" and cpu_clock(None) == "wall"
    waiting = threading.Event()
    blocked = lambda: waiting.wait(0.05)  # noqa: E731 - the thread is off the CPU throughout
    assert CpuTimer(cold=False, clock="wall").time_ms(blocked) >= 45
    assert CpuTimer(cold=False, clock="thread").time_ms(blocked) < 10
    busy = lambda: sum(range(200_000))  # noqa: E731 - on the CPU throughout: both clocks see it
    assert CpuTimer(cold=False, clock="thread").time_ms(busy) > 0.5

STEADY_ALLOCATOR_PROBE = """
import ctypes, resource, sys
import torch
from perfbisect.kernels.harness.timing import steady_host_allocator

def faults_per_call(warm):
    for _ in range(warm):
        torch.empty(1 << 20).fill_(1.0)  # a 4 MiB block, written: its pages are touched
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        torch.empty(1 << 20).fill_(1.0)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10

ctypes.CDLL("libc.so.6").mallopt(-3, 128 << 10)  # the worst history: every 4 MiB block a fresh mmap
print(faults_per_call(3), steady_host_allocator(), faults_per_call(20))  # the heap grows in the warm-up
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_steady_host_allocator_keeps_large_blocks_on_touched_pages():
    """A 4 MiB tensor allocated on every call faults in its 1,024 pages each time when glibc
    serves it with a fresh mmap; after steady_host_allocator, freed blocks are reused."""
    out = subprocess.run([sys.executable, "-c", STEADY_ALLOCATOR_PROBE], capture_output=True, text=True, check=True)
    before, applied, after = out.stdout.split()
    assert float(before) > 500, out.stdout
    assert applied == "True"
    assert float(after) < 50, out.stdout
