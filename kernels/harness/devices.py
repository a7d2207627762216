"""What the harness knows of a device besides torch's view of it: the vendor, the cache levels a
kernel can hit (what "cold" must evict), their sizes by architecture where the device does not
say, and the environment that keeps a vendor's JIT caches per revision. Torch-free and pure: the
vendor modules (nvidia.py, amd.py) read the device and call these.

    levels = amd_cache_levels("gfx950", xcds=8, smi_caches=None)   # [L2 4 MiB x 8, MALL 256 MiB]
    flush_bytes(levels)                                             # 2 x (32 + 256) MiB
    cache_override("L2=32MiB,MALL=256MiB")                          # PERFBISECT_GPU_CACHES
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

# The flush writes this many times the caches' total capacity: a write-allocate cache with
# an LRU-like policy keeps nothing of a working set after twice its size streamed through it.
FLUSH_FACTOR = 2
CACHE_OVERRIDE_ENV = "PERFBISECT_GPU_CACHES"
DEVICE_CLASS_VENDORS = {"cpu": "cpu", "cuda": "nvidia", "rocm": "amd"}
ROCM_ONLY = "needs ROCm and flydsl/aiter"
MiB = 1 << 20


@dataclass(frozen=True)
class CacheLevel:
    name: str            # "L2", "MALL" (AMD Infinity Cache), "LLC" (a CPU's last level)
    bytes_each: int
    instances: int = 1   # AMD's L2 is per XCD: a kernel spread over 8 XCDs fills 8 of them
    source: str = "device"   # device, amdsmi, table (by architecture) or setting

    @property
    def total_bytes(self) -> int:
        return self.bytes_each * self.instances

    def as_dict(self) -> dict:
        return {**asdict(self), "total_bytes": self.total_bytes}


@dataclass(frozen=True)
class AmdArch:
    """Per-architecture facts of AMD Instinct parts that neither torch nor amdsmi reports as such."""

    parts: str
    l2_bytes_per_xcd: int
    mall_bytes: int        # Infinity Cache (memory-attached last level); 0 where there is none
    xcds: int              # XCDs of the full part (SPX mode)
    cus_per_xcd: int       # active CUs per XCD, to count XCDs from the CU count (CPX: one XCD)


# CDNA3 (MI300X/MI325X: 8 XCDs x 38 CUs = 304; MI300A: 6 x 38 = 228) and CDNA4 (MI355X/MI350X:
# 8 x 32 = 256): 4 MB L2 per XCD, 256 MB Infinity Cache. CDNA2 (MI250X, per GCD): 8 MB L2, no MALL.
AMD_ARCHES = {
    "gfx942": AmdArch("MI300X/MI300A/MI325X", 4 * MiB, 256 * MiB, 8, 38),
    "gfx950": AmdArch("MI355X/MI350X", 4 * MiB, 256 * MiB, 8, 32),
    "gfx90a": AmdArch("MI250X/MI210 (one GCD)", 8 * MiB, 0, 1, 110),
}


def base_arch(gcn_arch_name: str | None) -> str | None:
    """'gfx942:sramecc+:xnack-' -> 'gfx942' (torch's gcnArchName carries target features)."""
    return gcn_arch_name.split(":")[0].strip() or None if gcn_arch_name else None


def xcd_count(arch: str | None, cu_count: int | None, sysfs_xcc: int | None = None) -> tuple[int | None, str]:
    """(XCDs, where the number came from): KFD's num_xcc when read, else the CU count over the
    architecture's CUs per XCD (a CPX partition shows one XCD's CUs), else the full part's."""
    if sysfs_xcc:
        return sysfs_xcc, "kfd"
    spec = AMD_ARCHES.get(arch or "")
    if spec is None:
        return None, "unknown"
    if cu_count:
        return max(1, min(spec.xcds, round(cu_count / spec.cus_per_xcd))), "table"
    return spec.xcds, "table"


def amd_cache_levels(arch: str | None, xcds: int | None, smi_caches: list[dict] | None = None,
                     torch_l2_bytes: int | None = None) -> list[CacheLevel]:
    """Every level a kernel's data can stay in: the per-XCD L2s and the MALL. Sizes from amdsmi's
    cache list (cache_size in KB per cache_level) where given, else torch's L2 size, else the
    table. Raises ValueError for an architecture the table lacks when the device says nothing."""
    spec = AMD_ARCHES.get(arch or "")
    xcds = xcds or (spec.xcds if spec else 1)
    by_level = smi_levels(smi_caches or [])
    if 2 in by_level:
        l2 = CacheLevel("L2", by_level[2], xcds, "amdsmi")
    elif torch_l2_bytes:
        l2 = CacheLevel("L2", torch_l2_bytes, xcds, "device")
    elif spec:
        l2 = CacheLevel("L2", spec.l2_bytes_per_xcd, xcds, "table")
    else:
        raise ValueError(f"no cache sizes known for AMD architecture {arch!r}: set {CACHE_OVERRIDE_ENV}")
    levels = [l2]
    if 3 in by_level:
        levels.append(CacheLevel("MALL", by_level[3], 1, "amdsmi"))
    elif spec and spec.mall_bytes:
        levels.append(CacheLevel("MALL", spec.mall_bytes, 1, "table"))
    return levels


def smi_levels(smi_caches: list[dict]) -> dict[int, int]:
    """Largest data cache per level, in bytes, from amdsmi_get_gpu_cache_info()'s list
    (cache_size is in KB; instruction-only caches are left out: no kernel data stays there)."""
    sizes: dict[int, int] = {}
    for entry in smi_caches:
        properties = entry.get("cache_properties") or []
        if properties and "DATA_CACHE" not in properties:
            continue
        try:
            level, size = int(entry["cache_level"]), int(entry["cache_size"]) * 1024
        except (KeyError, TypeError, ValueError):
            continue
        sizes[level] = max(size, sizes.get(level, 0))
    return sizes


def flush_bytes(levels: list[CacheLevel]) -> int:
    """Bytes the flush writes: FLUSH_FACTOR x the total capacity of every level."""
    return FLUSH_FACTOR * sum(level.total_bytes for level in levels)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'256MiB', '4M', '4096K', '52428800' -> bytes. Raises ValueError."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size (e.g. 256MiB, 4M, 52428800)")
    unit = (match.group(2) or "").upper()[:1]
    return int(float(match.group(1)) * _UNITS[unit])


def cache_override(text: str | None) -> list[CacheLevel] | None:
    """PERFBISECT_GPU_CACHES='L2=4MiB*8,MALL=256MiB' -> the levels it names (replacing what was
    detected); None when unset. Raises ValueError with a message for a malformed value."""
    if not text or not text.strip():
        return None
    levels = []
    for item in text.split(","):
        name, sep, size = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{CACHE_OVERRIDE_ENV}: {item!r} must look like NAME=SIZE[*COUNT]")
        size, _, count = size.partition("*")
        instances = int(count) if count.strip() else 1
        if instances < 1:
            raise ValueError(f"{CACHE_OVERRIDE_ENV}: {item!r} needs a positive count")
        levels.append(CacheLevel(name.strip(), parse_size(size), instances, "setting"))
    return levels


def configured_levels(detected: list[CacheLevel]) -> list[CacheLevel]:
    """The setting's levels when PERFBISECT_GPU_CACHES is set, else the detected ones."""
    return cache_override(os.environ.get(CACHE_OVERRIDE_ENV)) or detected


# The variables jit_env sets: they differ per revision, so the fork server starts without them
# (kernels/harness/launch.py PER_TRIAL_KEYS).
JIT_CACHE_KEYS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR")


def jit_env(jit_dir: Path) -> dict[str, str]:
    """The JIT caches of every vendor's compilers, pointed at the revision's own directory: a
    trial never reuses what another revision compiled (cold), and the trials of one revision share
    their binaries (Triton's and FlyDSL's keys hash the kernel source; FlyDSL's does not hash its
    C++ passes, which a revision's build changes: the directory per revision covers that too)."""
    return dict(zip(JIT_CACHE_KEYS, (str(jit_dir), str(jit_dir / "inductor"), str(jit_dir / "flydsl")), strict=True))


def vendor_of_class(device_class: str) -> str | None:
    """The vendor a device class promises ('rocm' -> 'amd'); None for a free-form GPU class
    ('h200', 'mi355x'), which any GPU may serve."""
    return DEVICE_CLASS_VENDORS.get(device_class)


def class_mismatch(device_class: str, vendor: str) -> str | None:
    """Why a worker with a `vendor` device must not serve `device_class`, or None when it may."""
    promised = vendor_of_class(device_class)
    if promised is None:
        return None if vendor in ("nvidia", "amd") else f"device class {device_class!r} needs a GPU; this host has none"
    if promised == vendor or (promised == "cpu"):
        return None
    have = {"cpu": "no GPU", "nvidia": "an NVIDIA GPU", "amd": "an AMD GPU (ROCm)"}[vendor]
    want = {"cuda": "an NVIDIA GPU (CUDA)", "rocm": "an AMD GPU (ROCm torch)"}[device_class]
    return f"device class {device_class!r} needs {want}; this host has {have}"
