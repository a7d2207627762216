"""The flush self-check: its decision on literal timings, and a measurement on this CPU."""
from __future__ import annotations

import pytest

from perfbisect.kernels.harness.flushcheck import judge_flush

# Read of a 128 MiB buffer on an MI355X-like part: from HBM after a flush that covers the MALL
# (~25 us), from the MALL when warm (~10 us), and the seed's first case: a flush of the 4 MB L2
# only, which leaves the buffer in the MALL, so "cold" reads as fast as warm.
COLD = [0.0252, 0.0249, 0.0255, 0.0251, 0.0250, 0.0262, 0.0248, 0.0253, 0.0250, 0.0254, 0.0249, 0.0251, 0.0256, 0.0250]
WARM = [0.0101, 0.0099, 0.0103, 0.0100, 0.0102, 0.0098, 0.0101, 0.0100, 0.0104, 0.0099, 0.0100, 0.0101, 0.0102, 0.0100]
L2_ONLY = [0.0102, 0.0100, 0.0104, 0.0099, 0.0101, 0.0103, 0.0100, 0.0101, 0.0098, 0.0102, 0.0100, 0.0101, 0.0103, 0.0099]


def test_a_flush_that_evicts_the_buffer_is_proven_cold():
    verdict = judge_flush(COLD, WARM)
    assert verdict.status == "cold" and not verdict.refused
    assert verdict.ratio == pytest.approx(0.0251 / 0.01005, rel=1e-6)  # medians
    assert "14 of 14 pairs" in verdict.reason


def test_a_flush_that_leaves_the_mall_warm_is_refused():
    verdict = judge_flush(L2_ONLY, WARM)
    assert verdict.refused and "leaves the buffer cached" in verdict.reason


def test_a_difference_that_only_noise_makes_is_refused():
    # medians differ by 1.3x, but the pairs disagree on which read was slower (a loaded host)
    cold = [1.3, 0.9, 1.4, 0.8, 1.5, 0.9, 1.3, 0.7, 1.4, 0.9]
    warm = [1.0, 1.2, 1.0, 1.3, 1.0, 1.2, 1.0, 1.1, 1.0, 1.2]
    verdict = judge_flush(cold, warm, min_ratio=1.0)
    assert verdict.refused and "too noisy" in verdict.reason


def test_too_few_or_broken_timings_are_refused():
    assert "too few" in judge_flush(COLD[:4], WARM[:4]).reason
    assert "not measuring" in judge_flush(COLD[:6], [0.0] * 6).reason
    assert judge_flush(COLD, WARM, min_ratio=3.0).refused  # 2.5x is not enough when 3x is asked


def test_the_check_runs_on_this_cpu_on_the_level_it_flushes():
    """Timing on a shared machine is noisy: the verdict may be either, but never without figures,
    on a buffer half the flushed level (the LLC, or the L2 where the LLC is over the cap, which
    the reason then says stays warm)."""
    from perfbisect.kernels.harness.flushcheck import check_flush
    from perfbisect.kernels.harness.timing import cpu_flush_bytes, cpu_llc_bytes

    verdict = check_flush("cpu", samples=8)
    assert verdict.status in ("cold", "not_cold") and verdict.cold_ms > 0 and verdict.warm_ms > 0
    assert verdict.buffer_bytes == cpu_flush_bytes() // 2 and verdict.flush_bytes > cpu_flush_bytes()
    assert ("last-level cache is over the flush's cap" in verdict.reason) == (cpu_flush_bytes() < cpu_llc_bytes())