"""What a worker's device is and whether its cold flush holds, as one report:

    python -m perfbisect.kernels.harness.doctor [--device auto|cpu|cuda] [--device-class rocm] [--json]

Prints the device's identity (vendor, arch, CU/SM and XCD counts, memory, driver, CUDA or
HIP/ROCm), the cache levels the flush covers and the bytes it writes, telemetry (clock,
temperature, power, throttle reasons), the JIT cache variables a trial gets, which built-in suites
this host can run, and the flush self-check (flushcheck.py). Exit status 1 when the flush is not
proven cold or the device class promises another vendor; `perfbisect worker` runs it at start and
`perfbisect doctor` shows it."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def report(device: str, device_class: str | None = None, flush_check: bool = True) -> dict:
    import torch

    from perfbisect.kernels.harness.devices import class_mismatch, jit_env
    from perfbisect.kernels.harness.flushcheck import check_flush
    from perfbisect.kernels.harness.provenance import describe_device, open_clock
    from perfbisect.kernels.suites import suite_availability

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    info = describe_device(device)
    found = {"device": info, "telemetry": open_clock(device).telemetry(),
             "jit_env": sorted(jit_env(Path("REVISION/jit"))), "suites": suite_availability(info.get("vendor")),
             "class_mismatch": class_mismatch(device_class, info.get("vendor", "cpu")) if device_class else None}
    found["flush"] = check_flush(device).as_dict() if flush_check else {"status": "skipped", "reason": "--no-flush-check"}
    found["ok"] = found["flush"]["status"] != "not_cold" and not found["class_mismatch"]
    return found


def format_report(found: dict) -> str:
    info = found["device"]
    ident = ", ".join(f"{key} {info[key]}" for key in ("vendor", "arch", "capability", "cu_count", "sm_count",
                                                       "xcd_count", "driver", "cuda", "hip", "rocm", "torch")
                      if info.get(key) is not None)
    lines = [f"device: {info.get('name')} ({ident})"]
    for level in info.get("caches") or []:
        lines.append(f"  cache {level['name']}: {level['bytes_each'] >> 10} KiB x {level['instances']} "
                     f"({level['source']})")
    if info.get("flush_bytes"):
        lines.append(f"  cold flush writes {info['flush_bytes'] >> 20} MiB before every timed call")
    lines.append(f"telemetry: {found['telemetry'] or 'none (no NVML/amdsmi, or a CPU)'}")
    lines.append(f"JIT caches per revision: {', '.join(found['jit_env'])}")
    for name, why in sorted(found["suites"].items()):
        lines.append(f"suite {name}: {'available' if why is None else why}")
    if found["class_mismatch"]:
        lines.append(f"device class: {found['class_mismatch']}")
    flush = found["flush"]
    lines.append(f"flush self-check: {flush['status']}: {flush['reason']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfbisect.kernels.harness.doctor")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--device-class", default=None)
    parser.add_argument("--no-flush-check", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        found = report(args.device, args.device_class, not args.no_flush_check)
    except ValueError as exc:  # a malformed PERFBISECT_GPU_CACHES, an architecture without sizes
        print(f"error: {exc}")
        return 1
    print(json.dumps(found, indent=2, default=str) if args.json else format_report(found))
    return 0 if found["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
