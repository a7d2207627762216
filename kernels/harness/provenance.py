"""Device provenance and the fingerprint basis of a trial."""
from __future__ import annotations

import platform
from pathlib import Path

import torch

from perfbisect.kernels.harness.timing import cpu_llc_bytes


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


def _nvml_driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None


def describe_device(kind: str, threads: int | None = None) -> dict:
    info = {"kind": kind, "torch": torch.__version__, "triton": _triton_version(),
            "python": platform.python_version(), "cuda": torch.version.cuda, "driver": None}
    if kind == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, l2_bytes=int(getattr(props, "L2_cache_size", 0)),
                    sm_count=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}", driver=_nvml_driver())
    else:
        info.update(name=_cpu_name(), l2_bytes=cpu_llc_bytes(), threads=threads)
    return info
