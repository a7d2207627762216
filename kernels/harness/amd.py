"""AMD Instinct (ROCm) side of the device layer: identity, caches and telemetry through torch's
HIP properties and the `amdsmi` Python package (optional: without it the tables of devices.py
give the cache sizes and clocks read None).

Only fields of amdsmi's documented Python API are read (ROCm/amdsmi py-interface):
amdsmi_get_gpu_asic_info (market_name, num_compute_units, target_graphics_version),
amdsmi_get_gpu_driver_info (driver_version), amdsmi_get_fw_info (fw_list), amdsmi_get_gpu_cache_info
(cache_level, cache_size in KB, cache_properties), amdsmi_get_gpu_kfd_info (node_id),
amdsmi_get_clock_info(GFX) (clk, max_clk), amdsmi_get_gpu_metrics_info (temperature_hotspot,
current_socket_power, average_socket_power, throttle_status), amdsmi_get_violation_status
(active_* flags). Unsupported values come back from amdsmi as the string "N/A".
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from perfbisect.kernels.harness.devices import (CacheLevel, amd_cache_levels, base_arch, configured_levels,
                                                flush_bytes, xcd_count)

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
ROCM_INFO = Path("/opt/rocm/.info/version")
# amdsmi_get_violation_status: a throttle is active now (PROCHOT, package power, socket/VR/HBM thermal).
VIOLATION_FLAGS = ("active_prochot_thrm", "active_ppt_pwr", "active_socket_thrm", "active_vr_thrm",
                   "active_hbm_thrm")


def known(value: Any) -> Any:
    """amdsmi's "N/A" (and an empty string) as None."""
    return None if value in ("N/A", "", None) else value


def firmware_digest(fw_info: dict | None) -> str | None:
    """12 hex digits naming every firmware version (amdsmi_get_fw_info's fw_list): a firmware
    update changes a part's performance, so it is part of the fingerprint."""
    entries = (fw_info or {}).get("fw_list") or []
    if not entries:
        return None
    # fw_name is amdsmi's AmdSmiFwBlock enum member: its name, not its number, names the block
    text = ";".join(sorted(f"{getattr(e.get('fw_name'), 'name', e.get('fw_name'))}={e.get('fw_version')}"
                           for e in entries))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def kfd_num_xcc(node_id: int | None, nodes: Path = KFD_NODES) -> int | None:
    """XCDs (KFD's num_xcc) of a KFD topology node, or None where unreadable."""
    if node_id is None:
        return None
    try:
        text = (nodes / str(node_id) / "properties").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "num_xcc" and value.strip().isdigit():
            return int(value) or None
    return None


def rocm_version(path: Path = ROCM_INFO) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def throttle_reasons(violation: dict | None, metrics: dict | None) -> list[str] | None:
    """The active throttles' names ([] when none), or None when the device reports neither the
    violation flags nor the metrics' throttle_status."""
    if violation:
        flags = {name: known(violation.get(name)) for name in VIOLATION_FLAGS}
        if any(value is not None for value in flags.values()):
            return [name.removeprefix("active_") for name, value in flags.items() if value]
    status = known((metrics or {}).get("throttle_status"))
    if status is None:
        return None
    return ["throttle_status"] if status else []


class AmdSmiDevice:
    """One GPU's amdsmi handle; `smi` is the amdsmi module (a recorded stand-in in tests)."""

    def __init__(self, smi, handle):
        self.smi = smi
        self.handle = handle

    @classmethod
    def open(cls, bdf: str | None, index: int, smi=None) -> AmdSmiDevice | None:
        """The processor at PCI address `bdf` (HIP_VISIBLE_DEVICES renumbers torch's devices;
        the bus address does not), else amdsmi's `index`-th; None without amdsmi or a GPU."""
        try:
            if smi is None:
                import amdsmi as smi
            smi.amdsmi_init()
            if bdf:
                return cls(smi, smi.amdsmi_get_processor_handle_from_bdf(bdf))
            return cls(smi, smi.amdsmi_get_processor_handles()[index])
        except Exception:  # no amdsmi, no driver, not this GPU: telemetry is optional
            return None

    def call(self, name: str, *args) -> Any:
        """One amdsmi query; None when this amdsmi lacks it or the device does not support it."""
        fn = getattr(self.smi, name, None)
        if fn is None:
            return None
        try:
            return fn(self.handle, *args)
        except Exception:
            return None

    def static_info(self) -> dict:
        asic = self.call("amdsmi_get_gpu_asic_info") or {}
        driver = self.call("amdsmi_get_gpu_driver_info") or {}
        kfd = self.call("amdsmi_get_gpu_kfd_info") or {}
        return {"market_name": known(asic.get("market_name")),
                "cu_count": known(asic.get("num_compute_units", asic.get("num_of_compute_units"))),
                "arch": known(asic.get("target_graphics_version")),
                "driver": known(driver.get("driver_version")),
                "firmware": firmware_digest(self.call("amdsmi_get_fw_info")),
                "caches": self.call("amdsmi_get_gpu_cache_info"),
                "kfd_node": known(kfd.get("node_id"))}

    def clock(self) -> dict:
        gfx = getattr(getattr(self.smi, "AmdSmiClkType", None), "GFX", None)
        return (self.call("amdsmi_get_clock_info", gfx) if gfx is not None else None) or {}

    def telemetry(self) -> dict:
        metrics = self.call("amdsmi_get_gpu_metrics_info") or {}
        clock = self.clock()
        power = known(metrics.get("current_socket_power")) or known(metrics.get("average_socket_power"))
        return {"clock_mhz": known(clock.get("clk")), "max_clock_mhz": known(clock.get("max_clk")),
                "temperature_c": known(metrics.get("temperature_hotspot")), "power_w": power,
                "throttle": throttle_reasons(self.call("amdsmi_get_violation_status"), metrics)}


class AmdClock:
    """The GFX clock per sample and the SMU's own throttle flags. The nvbench rule (a sample under
    75% of the maximum clock is dropped) is not used on AMD: the GFX clock drops to deep sleep
    between short kernels, and a reading after the synchronise would drop good samples. A sample is
    dropped when amdsmi says a power or thermal throttle is active."""

    def __init__(self, device: AmdSmiDevice | None):
        self.device = device
        self.max_mhz = known(device.clock().get("max_clk")) if device else None

    @property
    def available(self) -> bool:
        return self.device is not None

    def read_mhz(self) -> float | None:
        if self.device is None:
            return None
        mhz = known(self.device.clock().get("clk"))
        return float(mhz) if mhz is not None else None

    def throttled(self, mhz: float | None, fraction: float = 0.75) -> bool:
        if self.device is None:
            return False
        reasons = throttle_reasons(self.device.call("amdsmi_get_violation_status"), None)
        if reasons is None:  # an amdsmi or a part without the violation flags: the metrics' status
            reasons = throttle_reasons(None, self.device.call("amdsmi_get_gpu_metrics_info"))
        return bool(reasons)

    def telemetry(self) -> dict | None:
        return self.device.telemetry() if self.device else None


def torch_bdf(props) -> str | None:
    """'0000:0c:00.0' from torch's device properties (pci_domain_id/pci_bus_id/pci_device_id)."""
    try:
        return f"{int(props.pci_domain_id):04x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def describe_amd(props, hip_version: str | None, smi: AmdSmiDevice | None,
                 kfd_nodes: Path = KFD_NODES) -> dict:
    """The identity of an AMD GPU from torch's properties (`props`: gcnArchName, name,
    multi_processor_count, total_memory, L2_cache_size) and amdsmi where open."""
    static = smi.static_info() if smi else {}
    arch = base_arch(getattr(props, "gcnArchName", None)) or static.get("arch")
    cu_count = int(getattr(props, "multi_processor_count", 0) or 0) or static.get("cu_count")
    xcds, xcd_source = xcd_count(arch, cu_count, kfd_num_xcc(static.get("kfd_node"), kfd_nodes))
    torch_l2 = int(getattr(props, "L2_cache_size", 0) or 0) or None
    levels = configured_levels(amd_cache_levels(arch, xcds, static.get("caches"), torch_l2))
    return {"vendor": "amd", "name": getattr(props, "name", None) or static.get("market_name"),
            "arch": arch, "cu_count": cu_count, "xcd_count": xcds, "xcd_source": xcd_source,
            "memory_bytes": int(getattr(props, "total_memory", 0) or 0) or None,
            "driver": static.get("driver"), "hip": hip_version, "rocm": rocm_version(),
            "firmware": static.get("firmware"), "l2_bytes": torch_l2 or levels[0].bytes_each,
            **cache_fields(levels)}


def cache_fields(levels: list[CacheLevel]) -> dict:
    return {"caches": [level.as_dict() for level in levels], "flush_bytes": flush_bytes(levels)}
