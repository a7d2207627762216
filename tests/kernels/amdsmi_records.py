"""Recorded amdsmi outputs, shaped as amdsmi's Python interface returns them (ROCm/amdsmi
py-interface/amdsmi_interface.py and its README; the cache list as `amd-smi static --cache`
prints it for an MI300-series part: L1 32 KB, L2 4096 KB, L3 (Infinity Cache) 262144 KB). Only
fields that interface returns appear; unsupported values are its "N/A" string.

RecordedAmdSmi stands in for the `amdsmi` module: the same function names, called with a handle."""
from __future__ import annotations

from enum import IntEnum


class AmdSmiClkType(IntEnum):  # amdsmi.AmdSmiClkType (subset)
    SYS = 0
    GFX = 0
    MEM = 4


class AmdSmiFwBlock(IntEnum):  # amdsmi.AmdSmiFwBlock (subset)
    AMDSMI_FW_ID_SMU = 1
    AMDSMI_FW_ID_CP_MEC1 = 7
    AMDSMI_FW_ID_PSP_SOSDRV = 30


def caches(l2_kb: int = 4096, mall_kb: int = 262144, cus: int = 304) -> list[dict]:
    return [{"cache_properties": ["DATA_CACHE", "SIMD_CACHE"], "cache_size": 32, "cache_level": 1,
             "max_num_cu_shared": 2, "num_cache_instance": cus // 2},
            {"cache_properties": ["INST_CACHE", "SIMD_CACHE"], "cache_size": 64, "cache_level": 1,
             "max_num_cu_shared": 2, "num_cache_instance": cus // 2},
            {"cache_properties": ["DATA_CACHE", "SIMD_CACHE"], "cache_size": l2_kb, "cache_level": 2,
             "max_num_cu_shared": cus, "num_cache_instance": 1},
            {"cache_properties": ["DATA_CACHE", "SIMD_CACHE"], "cache_size": mall_kb, "cache_level": 3,
             "max_num_cu_shared": cus, "num_cache_instance": 1}]


def metrics(gfxclk: int = 2100, hotspot: int = 54, power: int = 712, throttle="N/A") -> dict:
    """amdsmi_get_gpu_metrics_info (the fields the harness reads, and a few around them)."""
    return {"temperature_edge": "N/A", "temperature_hotspot": hotspot, "temperature_mem": 46,
            "average_socket_power": "N/A", "current_socket_power": power, "average_gfx_activity": 100,
            "current_gfxclk": gfxclk, "average_gfxclk_frequency": "N/A", "throttle_status": throttle,
            "indep_throttle_status": "N/A", "current_gfxclks": [gfxclk] * 8, "gfxclk_lock_status": 0}


def violation(power: bool = False, thermal: bool = False) -> dict:
    """amdsmi_get_violation_status."""
    return {"reference_timestamp": 1733370000000000, "violation_timestamp": 1733370000000000,
            "acc_counter": 91234, "acc_prochot_thrm": 0, "acc_ppt_pwr": 1200, "acc_socket_thrm": 0,
            "acc_vr_thrm": 0, "acc_hbm_thrm": 0, "per_prochot_thrm": 0, "per_ppt_pwr": 1, "per_socket_thrm": 0,
            "per_vr_thrm": 0, "per_hbm_thrm": 0, "active_prochot_thrm": False, "active_ppt_pwr": power,
            "active_socket_thrm": thermal, "active_vr_thrm": False, "active_hbm_thrm": False}


MI300X = {
    "bdf": "0000:0c:00.0",
    "asic": {"market_name": "AMD Instinct MI300X", "vendor_id": "0x1002",
             "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002", "device_id": "0x74a1",
             "rev_id": "0x00", "asic_serial": "0x5B1A4C3D2E1F0A9B", "oam_id": 3, "num_compute_units": 304,
             "target_graphics_version": "gfx942"},
    "driver": {"driver_name": "amdgpu", "driver_version": "6.10.5", "driver_date": "2015/01/01 00:00"},
    "fw": {"fw_list": [{"fw_name": AmdSmiFwBlock.AMDSMI_FW_ID_SMU, "fw_version": "85.118.0"},
                       {"fw_name": AmdSmiFwBlock.AMDSMI_FW_ID_CP_MEC1, "fw_version": "177"},
                       {"fw_name": AmdSmiFwBlock.AMDSMI_FW_ID_PSP_SOSDRV, "fw_version": "00.36.02.59"}]},
    "kfd": {"kfd_id": 45412, "node_id": 2, "current_partition_id": 0},
    "caches": caches(cus=304),
    "clock": {"clk": 2100, "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": False},
    "metrics": metrics(), "violation": violation(),
}

MI355X = {
    **MI300X,
    "bdf": "0000:75:00.0",
    "asic": {**MI300X["asic"], "market_name": "AMD Instinct MI355X", "device_id": "0x75a3",
             "num_compute_units": 256, "target_graphics_version": "gfx950"},
    "fw": {"fw_list": [{"fw_name": AmdSmiFwBlock.AMDSMI_FW_ID_SMU, "fw_version": "85.126.0"},
                       {"fw_name": AmdSmiFwBlock.AMDSMI_FW_ID_CP_MEC1, "fw_version": "187"},
                       {"fw_name": AmdSmiFwBlock.AMDSMI_FW_ID_PSP_SOSDRV, "fw_version": "00.36.02.64"}]},
    "caches": caches(cus=256),
    "clock": {"clk": 2400, "min_clk": 500, "max_clk": 2400, "clk_locked": False, "clk_deep_sleep": False},
    "metrics": metrics(gfxclk=2400, power=1380),
}


class RecordedAmdSmi:
    """The amdsmi module's functions over one recorded GPU (missing: amdsmi versions without it)."""

    AmdSmiClkType = AmdSmiClkType

    def __init__(self, record: dict):
        self.record = dict(record)
        self.calls: list[str] = []

    def amdsmi_init(self, flags=None):
        self.calls.append("init")

    def amdsmi_get_processor_handles(self):
        return ["handle"]

    def amdsmi_get_processor_handle_from_bdf(self, bdf):
        if bdf != self.record["bdf"]:
            raise LookupError(f"no GPU at {bdf}")  # AmdSmiBdfFormatException / library error in amdsmi
        return "handle"

    def amdsmi_get_gpu_asic_info(self, handle):
        return dict(self.record["asic"])

    def amdsmi_get_gpu_driver_info(self, handle):
        return dict(self.record["driver"])

    def amdsmi_get_fw_info(self, handle):
        return self.record["fw"]

    def amdsmi_get_gpu_kfd_info(self, handle):
        return dict(self.record["kfd"])

    def amdsmi_get_gpu_cache_info(self, handle):
        return [dict(c) for c in self.record["caches"]]

    def amdsmi_get_clock_info(self, handle, clock_type):
        assert clock_type is AmdSmiClkType.GFX
        return dict(self.record["clock"])

    def amdsmi_get_gpu_metrics_info(self, handle):
        return dict(self.record["metrics"])

    def amdsmi_get_violation_status(self, handle):
        return dict(self.record["violation"])


class OlderAmdSmi(RecordedAmdSmi):
    """An amdsmi release before amdsmi_get_violation_status (throttling from the metrics only)."""

    amdsmi_get_violation_status = None
