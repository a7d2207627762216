"""NVIDIA side of the device layer: identity and L2 from torch's CUDA properties, clocks,
temperature, power and throttle reasons through NVML (pynvml, from nvidia-ml-py; optional)."""
from __future__ import annotations

from typing import Any

from perfbisect.kernels.harness.devices import CacheLevel, configured_levels, flush_bytes

DEFAULT_L2_BYTES = 50 << 20  # when torch does not say (H100/H200: 50 MiB)


def nvml_handle(nvml, index: int, pci_bus_id: str | None):
    """NVML numbers every GPU of the host and ignores CUDA_VISIBLE_DEVICES (a worker started with
    --gpu 3 sees its GPU as torch's 0): find the GPU by its PCI address where torch gives it."""
    if pci_bus_id:
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except Exception:
            pass
    return nvml.nvmlDeviceGetHandleByIndex(index)


def torch_pci_bus_id(props) -> str | None:
    """'00000000:0C:00.0' (NVML's form) from torch's device properties."""
    try:
        return f"{int(props.pci_domain_id):08X}:{int(props.pci_bus_id):02X}:{int(props.pci_device_id):02X}.0"
    except (AttributeError, TypeError, ValueError):
        return None


class NvidiaClock:
    """SM clock via NVML when importable; otherwise reads None."""

    def __init__(self, device_index: int = 0, enabled: bool = True, pci_bus_id: str | None = None):
        self.nvml = None
        self.max_mhz = None
        if not enabled:
            return
        try:
            import pynvml
            pynvml.nvmlInit()
            self.handle = nvml_handle(pynvml, device_index, pci_bus_id)
            self.max_mhz = float(pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM))
            self.nvml = pynvml
        except Exception:  # no NVML, no driver, not an NVIDIA GPU: clocks are optional
            self.nvml = None

    @property
    def available(self) -> bool:
        return self.nvml is not None

    def read_mhz(self) -> float | None:
        if self.nvml is None:
            return None
        try:
            return float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        except Exception:
            return None

    def throttled(self, mhz: float | None, fraction: float = 0.75) -> bool:
        """nvbench's rule: a sample taken under 75% of the maximum SM clock is dropped.
        (A power-capped H200 runs its largest GEMMs near that line: policy can lower it.)"""
        return mhz is not None and bool(self.max_mhz) and mhz < fraction * self.max_mhz

    def telemetry(self) -> dict | None:
        """Clock, temperature, power and the throttle reasons' bitmask, as NVML reports them now."""
        if self.nvml is None:
            return None
        nvml = self.nvml
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        return {"clock_mhz": self.read_mhz(), "max_clock_mhz": self.max_mhz,
                "temperature_c": _query(nvml.nvmlDeviceGetTemperature, self.handle, nvml.NVML_TEMPERATURE_GPU),
                "power_w": _scaled(_query(nvml.nvmlDeviceGetPowerUsage, self.handle), 1e-3),
                "throttle": throttle_names(_query(reasons, self.handle) if reasons else None, nvml)}


def _query(fn, *args) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def _scaled(value, factor: float) -> float | None:
    return None if value is None else round(value * factor, 1)


def throttle_names(mask: int | None, nvml) -> list[str] | None:
    """NVML's clock-event bitmask as names, leaving out idle and application-clock settings
    (not throttles); None when unreadable."""
    if mask is None:
        return None
    names = []
    for attr in dir(nvml):
        if attr.startswith("nvmlClocksThrottleReason") and attr not in (
                "nvmlClocksThrottleReasonGpuIdle", "nvmlClocksThrottleReasonApplicationsClocksSetting",
                "nvmlClocksThrottleReasonAll", "nvmlClocksThrottleReasonNone", "nvmlClocksThrottleReasonUnknown"):
            bit = getattr(nvml, attr)
            if isinstance(bit, int) and bit and mask & bit == bit:
                names.append(attr.removeprefix("nvmlClocksThrottleReason"))
    return sorted(names)


def nvml_driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None


def nvidia_levels(props) -> list[CacheLevel]:
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    return configured_levels([CacheLevel("L2", l2 or DEFAULT_L2_BYTES, 1, "device" if l2 else "table")])


def describe_nvidia(props) -> dict:
    """Identity (the keys earlier results carry, unchanged: their fingerprints stay valid) plus
    the cache levels the flush covers."""
    levels = nvidia_levels(props)
    return {"vendor": "nvidia", "name": props.name, "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
            "sm_count": props.multi_processor_count, "capability": f"{props.major}.{props.minor}",
            "memory_bytes": int(getattr(props, "total_memory", 0) or 0) or None, "driver": nvml_driver(),
            "caches": [level.as_dict() for level in levels], "flush_bytes": flush_bytes(levels)}
