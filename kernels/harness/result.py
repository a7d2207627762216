"""The trial result document: schema id, whole-trial failures, fingerprint basis and
validation against result.schema.json. Torch-free, so a worker can build a
build_error result without importing torch."""
from __future__ import annotations

import json
from pathlib import Path

SCHEMA_ID = "perfbisect.trial/1"
# 2: the trial's host allocator keeps fixed thresholds (timing.steady_host_allocator).
HARNESS_VERSION = "2"
SCHEMA_PATH = Path(__file__).with_name("result.schema.json")
TRIAL_STATUSES = ("ok", "import_error", "build_error", "timeout", "error")
CASE_STATUSES = ("ok", "wrong_results", "compile_error", "error")
# What an AMD GPU adds to its identity (2026-12-05): architecture (gfx942, gfx950), HIP version,
# CU and XCD counts (a CPX partition is another device) and a digest of its firmware. NVIDIA and
# CPU results never carry these keys, so their fingerprints (and HARNESS_VERSION) are unchanged.
AMD_IDENTITY_KEYS = ("arch", "hip", "cu_count", "xcd_count", "firmware")


def vendor_identity(device: dict) -> dict:
    """What tells devices apart beyond their name, driver and toolchain: the AMD identity keys
    (none for NVIDIA), and a CPU's flush scope where it flushes its private caches only (its
    last-level cache over the flush's cap: an L3-warm measurement, not comparable with a full
    flush; a CPU whose flush covers its LLC keeps the fingerprint it had)."""
    identity = {key: device[key] for key in AMD_IDENTITY_KEYS if device.get(key) is not None}
    if device.get("flush_scope"):
        identity["flush_scope"] = device["flush_scope"]
    return identity


def fingerprint_basis(device: dict, cold: bool) -> dict:
    """What the fingerprint hashes besides the repository and the case: only
    measurements with an equal basis are compared (conbench's rule)."""
    keys = ("kind", "name", "driver", "cuda", "torch", "triton", "threads")
    basis = {key: device.get(key) for key in keys}
    if device.get("clock"):  # a CPU trial's clock; GPU fingerprints stay what they were
        basis["clock"] = device["clock"]
    basis.update(vendor_identity(device))
    basis.update(harness_version=HARNESS_VERSION, cold=bool(cold))
    return basis


def failure_result(status: str, message: str, device: dict | None = None,
                   wall_s: float = 0.0, cold: bool = True) -> dict:
    """A whole-trial failure (import_error, build_error, timeout, error) as a result."""
    if status not in TRIAL_STATUSES or status == "ok":
        raise ValueError(f"not a failure status: {status!r}")
    device = device or {"kind": "unknown"}
    return {"schema": SCHEMA_ID, "harness_version": HARNESS_VERSION, "status": status,
            "error": message, "device": device, "fingerprint_basis": fingerprint_basis(device, cold),
            "cases": [], "wall_s": round(wall_s, 3)}


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validate_result(result: dict) -> None:
    """Raise jsonschema.ValidationError if `result` does not match the schema.
    Needs the jsonschema package (a test dependency, not a harness one)."""
    import jsonschema
    jsonschema.validate(result, load_schema())
