"""The device layer without a GPU: the AMD side on recorded amdsmi outputs (MI300X gfx942, MI355X
gfx950), the flush size per architecture and per setting, fingerprints, device classes, and the
NVIDIA side's unchanged identity keys."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perfbisect.kernels.harness import amd
from perfbisect.kernels.harness.amd import AmdClock, AmdSmiDevice, describe_amd, kfd_num_xcc, throttle_reasons
from perfbisect.kernels.harness.devices import (CacheLevel, amd_cache_levels, base_arch, cache_override, class_mismatch,
                                                flush_bytes, jit_env, parse_size, smi_levels, xcd_count)
from perfbisect.kernels.harness.nvidia import describe_nvidia, throttle_names
from perfbisect.kernels.harness.result import fingerprint_basis
from perfbisect.service.trials.service import fingerprint
from tests.kernels.amdsmi_records import MI300X, MI355X, OlderAmdSmi, RecordedAmdSmi, metrics, violation

MiB = 1 << 20


def hip_props(arch: str, cus: int, name: str, l2: int = 4 * MiB, bus: int = 0x0C):
    """torch.cuda.get_device_properties under ROCm (the fields the harness reads)."""
    return SimpleNamespace(name=name, gcnArchName=f"{arch}:sramecc+:xnack-", multi_processor_count=cus,
                           total_memory=192 << 30, L2_cache_size=l2, pci_domain_id=0, pci_bus_id=bus, pci_device_id=0)


def kfd_nodes(tmp_path: Path, node: int, num_xcc: int) -> Path:
    (tmp_path / str(node)).mkdir(parents=True)
    (tmp_path / str(node) / "properties").write_text(
        f"cpu_cores_count 0\nsimd_count 1216\ngfx_target_version 90402\nnum_xcc {num_xcc}\nlocation_id 3072\n")
    return tmp_path


def amd_device(record: dict, smi_class=RecordedAmdSmi) -> AmdSmiDevice:
    device = AmdSmiDevice.open(record["bdf"], 0, smi=smi_class(record))
    assert device is not None
    return device


def test_mi300x_is_described_from_torch_and_amdsmi_and_flushes_l2s_and_the_mall(tmp_path):
    info = describe_amd(hip_props("gfx942", 304, "AMD Instinct MI300X"), "6.4.43482", amd_device(MI300X),
                        kfd_nodes(tmp_path, 2, 8))
    assert (info["vendor"], info["arch"], info["cu_count"], info["xcd_count"], info["xcd_source"]) == (
        "amd", "gfx942", 304, 8, "kfd")
    assert info["driver"] == "6.10.5" and info["hip"] == "6.4.43482" and len(info["firmware"]) == 12
    assert [(c["name"], c["bytes_each"], c["instances"], c["source"]) for c in info["caches"]] == [
        ("L2", 4 * MiB, 8, "amdsmi"), ("MALL", 256 * MiB, 1, "amdsmi")]
    # the flush the seed's cold numbers needed: 2 x (8 x 4 MiB + 256 MiB), not 2 x the 4 MiB L2 torch reports
    assert info["flush_bytes"] == 2 * (32 + 256) * MiB == 576 * MiB


def test_without_amdsmi_the_table_by_arch_gives_the_mall_and_the_cu_count_the_xcds():
    info = describe_amd(hip_props("gfx950", 256, "AMD Instinct MI355X"), "7.0.1", None, Path("/nonexistent"))
    assert (info["arch"], info["xcd_count"], info["xcd_source"], info["firmware"]) == ("gfx950", 8, "table", None)
    assert [(c["name"], c["total_bytes"], c["source"]) for c in info["caches"]] == [
        ("L2", 32 * MiB, "device"), ("MALL", 256 * MiB, "table")]
    cpx = describe_amd(hip_props("gfx942", 38, "AMD Instinct MI300X"), "6.4", None, Path("/nonexistent"))
    assert cpx["xcd_count"] == 1 and cpx["flush_bytes"] == 2 * (4 + 256) * MiB  # one XCD, the whole MALL


def test_fingerprints_differ_across_gfx942_and_gfx950_and_firmware(tmp_path):
    mi300 = describe_amd(hip_props("gfx942", 304, "AMD Instinct"), "6.4", amd_device(MI300X), Path("/nonexistent"))
    mi355 = describe_amd(hip_props("gfx950", 256, "AMD Instinct", bus=0x75), "6.4", amd_device(MI355X),
                         Path("/nonexistent"))
    common = {"kind": "cuda", "torch": "2.9.0+rocm6.4", "triton": "3.4.0", "cuda": None}
    mi300, mi355 = {**common, **mi300}, {**common, **mi355}
    assert fingerprint_basis(mi300, True)["arch"] == "gfx942" and fingerprint_basis(mi355, True)["arch"] == "gfx950"
    assert fingerprint("flydsl", mi300) != fingerprint("flydsl", mi355)
    # the same part with other firmware, or partitioned CPX (38 CUs, one XCD), is another device
    assert fingerprint("flydsl", mi300) != fingerprint("flydsl", {**mi300, "firmware": "0" * 12})
    assert fingerprint("flydsl", mi300) != fingerprint("flydsl", {**mi300, "cu_count": 38, "xcd_count": 1})


def test_nvidia_and_cpu_fingerprints_are_what_they_were():
    """Results stored before the device layer keep comparing with new ones (no harness version bump)."""
    props = SimpleNamespace(name="NVIDIA H200", L2_cache_size=50 * MiB, multi_processor_count=132, major=9, minor=0,
                            total_memory=140 << 30)
    info = {"kind": "cuda", "torch": "2.11.0", "triton": "3.6.0", "cuda": "12.8", **describe_nvidia(props)}
    assert info["flush_bytes"] == 100 * MiB == 2 * props.L2_cache_size  # the flush it always wrote
    legacy = {k: info.get(k) for k in ("kind", "name", "driver", "cuda", "torch", "triton", "threads")}
    assert fingerprint_basis(info, True) == {**legacy, "harness_version": "2", "cold": True}
    old_service_basis = {"name": "NVIDIA H200", "driver": info["driver"], "cuda": "12.8", "torch": "2.11.0",
                         "triton": "3.6.0", "harness_version": "2"}
    assert fingerprint("lib", {**info, "harness_version": "2"}) == fingerprint("lib", old_service_basis)


def test_a_cpu_flush_of_the_private_caches_only_is_another_fingerprint():
    """A CPU whose LLC is over the flush's cap flushes its L2 only (an L3-warm measurement): its
    trials are not compared with full-flush ones; a CPU whose flush covers the LLC keeps its basis."""
    cpu = {"kind": "cpu", "name": "Xeon", "torch": "2.13.0", "triton": None, "cuda": None, "threads": 1,
           "clock": "thread"}
    assert "flush_scope" not in fingerprint_basis(cpu, True)
    private = {**cpu, "flush_scope": "private"}
    assert fingerprint_basis(private, True)["flush_scope"] == "private"
    assert fingerprint("lib", private) != fingerprint("lib", cpu)


def test_amd_clock_reads_gfx_and_drops_samples_only_under_an_active_throttle():
    clock = AmdClock(amd_device(MI355X))
    assert clock.available and clock.max_mhz == 2400 and clock.read_mhz() == 2400.0
    assert not clock.throttled(200.0)  # a deep-sleep reading between kernels is not a throttle
    hot = amd_device({**MI355X, "violation": violation(power=True)})
    assert AmdClock(hot).throttled(2400.0)
    telemetry = AmdClock(hot).telemetry()
    assert telemetry == {"clock_mhz": 2400, "max_clock_mhz": 2400, "temperature_c": 54, "power_w": 1380,
                         "throttle": ["ppt_pwr"]}


def test_older_amdsmi_throttle_comes_from_the_metrics_and_unknown_stays_unknown():
    assert throttle_reasons(None, metrics(throttle=True)) == ["throttle_status"]
    assert throttle_reasons(None, metrics(throttle=False)) == []
    assert throttle_reasons(None, metrics()) is None  # "N/A": cannot tell, never a silent "not throttled"
    older = amd_device({**MI300X, "metrics": metrics(throttle=True)}, OlderAmdSmi)
    assert AmdClock(older).throttled(None) and AmdClock(older).telemetry()["throttle"] == ["throttle_status"]
    assert not AmdClock(None).available and AmdClock(None).read_mhz() is None and AmdClock(None).telemetry() is None


def test_amdsmi_is_opened_on_torchs_gpu_by_pci_address_and_absent_amdsmi_is_none():
    assert AmdSmiDevice.open("0000:0c:00.0", 0, smi=RecordedAmdSmi(MI300X)) is not None
    assert AmdSmiDevice.open("0000:99:00.0", 0, smi=RecordedAmdSmi(MI300X)) is None  # another GPU's address
    assert amd.torch_bdf(hip_props("gfx942", 304, "x", bus=0x0C)) == "0000:0c:00.0"
    assert AmdSmiDevice.open(None, 0, smi=object()) is None  # a module without amdsmi_init


@pytest.mark.parametrize(("arch", "cus", "xcds"), [("gfx942", 304, 8), ("gfx942", 228, 6), ("gfx942", 38, 1),
                                                    ("gfx950", 256, 8), ("gfx950", 32, 1), ("gfx90a", 110, 1)])
def test_xcds_from_the_cu_count_per_architecture(arch, cus, xcds):
    assert xcd_count(arch, cus) == (xcds, "table")
    assert xcd_count(arch, cus, sysfs_xcc=4) == (4, "kfd")
    assert xcd_count("gfx1100", 48) == (None, "unknown")


@pytest.mark.parametrize(("arch", "expected"), [("gfx942", 2 * (8 * 4 + 256) * MiB), ("gfx950", 2 * (8 * 4 + 256) * MiB),
                                                ("gfx90a", 2 * 8 * MiB)])
def test_flush_size_per_architecture_from_the_table(arch, expected):
    xcds, _ = xcd_count(arch, None)
    assert flush_bytes(amd_cache_levels(arch, xcds)) == expected


def test_an_unknown_architecture_without_device_sizes_asks_for_the_setting():
    with pytest.raises(ValueError, match="PERFBISECT_GPU_CACHES"):
        amd_cache_levels("gfx1100", 1)
    assert amd_cache_levels("gfx1100", 1, torch_l2_bytes=6 * MiB) == [CacheLevel("L2", 6 * MiB, 1, "device")]


def test_amdsmi_cache_list_keeps_data_caches_per_level_in_bytes():
    assert smi_levels(MI300X["caches"]) == {1: 32 << 10, 2: 4 * MiB, 3: 256 * MiB}
    assert smi_levels([{"cache_properties": ["INST_CACHE"], "cache_size": 64, "cache_level": 1}]) == {}


def test_the_setting_replaces_the_detected_levels(monkeypatch):
    assert cache_override("L2=4MiB*8, MALL=256MiB") == [CacheLevel("L2", 4 * MiB, 8, "setting"),
                                                         CacheLevel("MALL", 256 * MiB, 1, "setting")]
    assert cache_override("") is None and cache_override(None) is None
    assert parse_size("52428800") == 50 * MiB and parse_size("4096K") == 4 * MiB and parse_size("1.5G") == 3 << 29
    for bad in ("L2", "L2=lots", "=4M", "L2=4M*0"):
        with pytest.raises(ValueError):
            cache_override(bad)
    monkeypatch.setenv("PERFBISECT_GPU_CACHES", "LLC=512MiB")
    info = describe_amd(hip_props("gfx950", 256, "AMD Instinct MI355X"), "7.0", None, Path("/nonexistent"))
    assert info["flush_bytes"] == 1024 * MiB and info["caches"][0]["source"] == "setting"


def test_kfd_num_xcc_is_read_from_the_topology_node(tmp_path):
    nodes = kfd_nodes(tmp_path, 3, 8)
    assert kfd_num_xcc(3, nodes) == 8 and kfd_num_xcc(4, nodes) is None and kfd_num_xcc(None, nodes) is None


def test_arch_names_and_device_classes():
    assert base_arch("gfx950:sramecc+:xnack-") == "gfx950" and base_arch("") is None and base_arch(None) is None
    assert class_mismatch("rocm", "amd") is None and class_mismatch("cuda", "nvidia") is None
    assert "AMD GPU (ROCm torch)" in class_mismatch("rocm", "nvidia")
    assert "NVIDIA GPU" in class_mismatch("cuda", "amd") and "no GPU" in class_mismatch("rocm", "cpu")
    assert class_mismatch("cpu", "amd") is None  # a GPU host may run the CPU stand-in
    assert class_mismatch("mi355x", "amd") is None and "needs a GPU" in class_mismatch("h200", "cpu")


def test_jit_caches_of_every_vendor_live_in_the_revisions_directory(tmp_path):
    env = jit_env(tmp_path / "jit")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "jit")
    assert env["FLYDSL_RUNTIME_CACHE_DIR"] == str(tmp_path / "jit" / "flydsl")


def test_nvml_throttle_bitmask_names_only_real_throttles():
    nvml = SimpleNamespace(nvmlClocksThrottleReasonGpuIdle=0x1, nvmlClocksThrottleReasonSwPowerCap=0x4,
                           nvmlClocksThrottleReasonHwSlowdown=0x8, nvmlClocksThrottleReasonAll=0xFF)
    assert throttle_names(0x1 | 0x4, nvml) == ["SwPowerCap"] and throttle_names(0x1, nvml) == []
    assert throttle_names(None, nvml) is None
