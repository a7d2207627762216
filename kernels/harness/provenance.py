"""Device provenance and the per-vendor pieces a trial uses: what the device is (describe_device),
its clock and throttle reader (open_clock), and the flush size its caches need. One interface,
two GPU vendors: NVIDIA (nvidia.py, NVML) and AMD Instinct under ROCm (amd.py, amdsmi), told
apart by torch.version.hip; torch's device kind is "cuda" for both."""
from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

import torch

from perfbisect.kernels.harness.amd import AmdClock, AmdSmiDevice, describe_amd, torch_bdf
from perfbisect.kernels.harness.devices import CacheLevel
from perfbisect.kernels.harness.nvidia import NvidiaClock, describe_nvidia, torch_pci_bus_id
from perfbisect.kernels.harness.timing import cpu_cache_bytes, cpu_clock, cpu_flush_bytes, cpu_llc_bytes


def gpu_vendor() -> str:
    """'amd' under a ROCm build of torch, 'nvidia' under a CUDA one (torch.version.hip)."""
    return "amd" if getattr(torch.version, "hip", None) else "nvidia"


def _triton_version() -> str | None:
    try:
        import triton
        return triton.__version__
    except Exception:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def amd_smi(index: int = 0) -> AmdSmiDevice | None:
    """amdsmi opened once per process on torch's device `index` (found by its PCI address)."""
    return AmdSmiDevice.open(torch_bdf(torch.cuda.get_device_properties(index)), index)


def cpu_levels() -> list[CacheLevel]:
    """cpu0's data and unified caches, smallest first; the largest is the LLC."""
    sizes = cpu_cache_bytes()
    return [CacheLevel("LLC" if i == len(sizes) - 1 else f"L{i + 1}", size, 1, "sysfs") for i, size in enumerate(sizes)]


def describe_device(kind: str, threads: int | None = None) -> dict:
    info = {"kind": kind, "torch": torch.__version__, "triton": _triton_version(),
            "python": platform.python_version(), "cuda": torch.version.cuda, "driver": None}
    if kind == "cuda":
        props = torch.cuda.get_device_properties(0)
        if gpu_vendor() == "amd":
            info.update(describe_amd(props, torch.version.hip, amd_smi()))
        else:
            info.update(describe_nvidia(props))
    else:
        levels, flushed = cpu_levels(), cpu_flush_bytes()
        info.update(vendor="cpu", name=_cpu_name(), l2_bytes=cpu_llc_bytes(), threads=threads,
                    clock=cpu_clock(threads),
                    caches=[level.as_dict() for level in levels], flush_bytes=flushed * 3 // 2)
        if flushed < cpu_llc_bytes():  # the LLC is over the flush's cap: it stays warm
            info["flush_scope"] = "private"
    return info


def open_clock(kind: str):
    """The clock and throttle reader of the device (NVML, amdsmi, or none on a CPU)."""
    if kind != "cuda":
        return NvidiaClock(enabled=False)
    if gpu_vendor() == "amd":
        return AmdClock(amd_smi())
    return NvidiaClock(pci_bus_id=torch_pci_bus_id(torch.cuda.get_device_properties(0)))
