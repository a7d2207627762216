"""A flush that proves itself: time a read of a buffer half the size of the last-level cache
right after the cold flush and right after a warm read of the same buffer. If the two are not
measurably different, the flush leaves the buffer cached, and "cold" would be a warm number: the
seed's first, wrong bisect table on MI355X, whose flush covered the 4 MB L2 and left 256 MB of
Infinity Cache warm. Half the cache, because a buffer as large as the cache, read cyclically,
misses an LRU cache even when warm.

    verdict = judge_flush(cold_ms=[...], warm_ms=[...])    # pure: FlushVerdict
    verdict = check_flush("cuda")                           # measures (torch)
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace

MIN_RATIO = 1.15      # a read after the flush must be at least this much slower than a warm one
MIN_SAMPLES = 5
MIN_WINS = 0.8        # fraction of (cold, warm) pairs in which the cold read must be the slower
SAMPLES = 15


@dataclass(frozen=True)
class FlushVerdict:
    status: str                  # "cold" (proven), "not_cold" (refused) or "skipped"
    reason: str
    cold_ms: float | None = None   # medians
    warm_ms: float | None = None
    ratio: float | None = None
    buffer_bytes: int | None = None
    flush_bytes: int | None = None

    @property
    def refused(self) -> bool:
        return self.status == "not_cold"

    def as_dict(self) -> dict:
        return asdict(self)


def judge_flush(cold_ms: list[float], warm_ms: list[float], min_ratio: float = MIN_RATIO) -> FlushVerdict:
    """Cold is proven when the median read after the flush is at least `min_ratio` times the
    median warm read, and in at least MIN_WINS of the pairs (cold_ms[i] was taken just before
    warm_ms[i]) the read after the flush was the slower: a sign test that a neighbour's load,
    which slows both reads of a pair alike, does not fool (12 of 14 pairs: p < 0.01)."""
    pairs = list(zip(cold_ms, warm_ms))
    if len(pairs) < MIN_SAMPLES:
        return FlushVerdict("not_cold", f"too few reads to tell ({len(pairs)} pairs; {MIN_SAMPLES} needed)")
    cold, warm = statistics.median(cold_ms), statistics.median(warm_ms)
    if warm <= 0:
        return FlushVerdict("not_cold", f"warm reads timed {warm} ms: the timer is not measuring", cold, warm)
    ratio = cold / warm
    wins = sum(1 for c, w in pairs if c > w)
    figures = f"read after the flush {cold:.4g} ms, after a warm read {warm:.4g} ms (x{ratio:.2f})"
    if ratio < min_ratio:
        return FlushVerdict("not_cold", f"{figures}, under x{min_ratio}: the flush leaves the buffer cached",
                            cold, warm, ratio)
    if wins < MIN_WINS * len(pairs):
        return FlushVerdict("not_cold", f"{figures}, but only {wins} of {len(pairs)} pairs had the read after the "
                            f"flush slower (at least {MIN_WINS:.0%} needed): too noisy to prove", cold, warm, ratio)
    return FlushVerdict("cold", f"{figures}; slower in {wins} of {len(pairs)} pairs", cold, warm, ratio)


def check_flush(device: str, samples: int = SAMPLES, flush_bytes: int | None = None) -> FlushVerdict:
    """Measure on this process's device ('cuda', which is also ROCm's, or 'cpu'). On a CPU whose
    last-level cache is larger than the flush's cap the flush evicts the private caches only,
    and the check proves that (a buffer half the L2's size), saying the last level stays warm.
    `flush_bytes` replaces the GPU flush's size (the seed's error, a flush smaller than the
    caches, reproduced on purpose: bench/flush_check.py, tests/kernels/test_gpu.py)."""
    import torch

    from perfbisect.kernels.harness.provenance import describe_device
    from perfbisect.kernels.harness.timing import CpuTimer, CudaTimer, cpu_flush_bytes, cpu_llc_bytes

    scope = ""
    if device == "cpu":
        torch.set_num_threads(1)
        level, llc = cpu_flush_bytes(), cpu_llc_bytes()
        cold_timer, warm_timer, buffer_bytes = CpuTimer(cold=True), CpuTimer(cold=False), level // 2
        flushed = cold_timer.flush_buffer.numel() * 4
        if level < llc:
            scope = (f" (the private caches: the {llc >> 20} MiB last-level cache is over the flush's cap, "
                     "PERFBISECT_CPU_FLUSH_CAP_BYTES, and stays warm)")
    else:
        info = describe_device("cuda")
        last_level = info["caches"][-1]
        buffer_bytes, flushed = last_level["total_bytes"] // 2, flush_bytes or info["flush_bytes"]
        cold_timer, warm_timer = CudaTimer(cold=True, flush_bytes=flushed), CudaTimer(cold=False)
    buffer = torch.ones(max(1, buffer_bytes // 4), dtype=torch.float32, device=device)

    def read():
        return buffer.sum()

    cold_ms, warm_ms = [], []
    for _ in range(samples):
        cold_ms.append(cold_timer.time_ms(read))
        read()  # the warm-up read: the timed one after it finds the buffer cached
        warm_ms.append(warm_timer.time_ms(read))
    verdict = judge_flush(cold_ms[1:], warm_ms[1:])  # the first pair pays the kernels' first launch
    return replace(verdict, reason=verdict.reason + scope, buffer_bytes=buffer_bytes, flush_bytes=flushed)
