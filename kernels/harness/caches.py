"""Caches shared by the trials of one revision on one toolchain, and only by them.

    caches = revision_caches(root, sha, env)   # -> RevisionCaches(jit_dir, reference_dir, ...)
    prune(root, keep=64)                        # drop the least recently used revisions

Layout: ROOT/<toolchain>/<sha>/{jit,reference}. The toolchain fingerprint hashes the
interpreter, the installed torch and triton, the NVIDIA driver (or ROCm and amdgpu), the machine and the trial's
environment, so a cache is never shared across revisions or toolchains: a trial stays cold
(nothing another revision compiled is reused) without recompiling its own revision's kernels
in every trial (Triton's keys are content hashes, so a hit is the same binary). Torch-free:
the worker computes this before it starts the trial.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from perfbisect.kernels.harness.devices import jit_env

DEFAULT_KEEP = 64
_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")


@dataclass(frozen=True)
class RevisionCaches:
    revision: str
    toolchain: str
    jit_dir: Path          # TRITON_CACHE_DIR (and torch inductor's) of every trial of the revision
    reference_dir: Path    # float64 references, keyed by suite, case, seed and revision

    def env(self) -> dict[str, str]:
        """Every vendor's JIT cache pointed at the revision's directory (devices.jit_env)."""
        return jit_env(self.jit_dir)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _first_line(path: str) -> str | None:
    try:
        return Path(path).read_text().splitlines()[0].strip() or None
    except (OSError, IndexError):
        return None


def _driver_version() -> str | None:
    return _first_line("/proc/driver/nvidia/version")


def _rocm_versions() -> dict[str, str]:
    """The ROCm release and the amdgpu kernel driver, where this host has them (only then: an
    NVIDIA or CPU host's toolchain fingerprint, and so its caches, stay what they were)."""
    found = {"rocm": _first_line("/opt/rocm/.info/version"), "amdgpu": _first_line("/sys/module/amdgpu/version")}
    return {key: value for key, value in found.items() if value}


def toolchain_fingerprint(env: dict[str, str] | None = None) -> str:
    """16 hex digits naming what compiles a revision's kernels besides its source."""
    basis = {"python": sys.version, "executable": os.path.realpath(sys.executable),
             "machine": platform.machine(), "torch": _version("torch"),
             "triton": _version("triton"), "driver": _driver_version(),
             "env": sorted((env or {}).items()), **_rocm_versions()}
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]


def revision_dir(revision: str) -> str:
    """The directory name of `revision`'s caches. Raises ValueError for what is not a sha."""
    if not _SHA.match(revision):
        raise ValueError(f"revision must be a commit sha, not {revision!r}")
    return revision.lower()


def revision_caches(root: Path, revision: str, env: dict[str, str] | None = None) -> RevisionCaches:
    """Create (or reuse) the cache directories of `revision` under `root`; marks them used."""
    toolchain = toolchain_fingerprint(env)
    base = Path(root) / toolchain / revision_dir(revision)
    jit, reference = base / "jit", base / "reference"
    jit.mkdir(parents=True, exist_ok=True)
    reference.mkdir(exist_ok=True)
    os.utime(base)  # last use, for prune()
    return RevisionCaches(revision.lower(), toolchain, jit, reference)


def prune(root: Path, keep: int = DEFAULT_KEEP, protect: Path | None = None) -> list[Path]:
    """Remove all but the `keep` most recently used revision caches under `root` (every
    toolchain together); never `protect`. Returns the removed directories."""
    root = Path(root)
    if not root.is_dir():
        return []
    entries = []
    for toolchain in root.iterdir():
        if toolchain.is_dir():
            entries.extend(p for p in toolchain.iterdir() if p.is_dir())
    entries.sort(key=last_used, reverse=True)
    removed = []
    for path in entries[keep:]:
        if protect is not None and path == protect:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    for toolchain in root.iterdir():
        try:
            if toolchain.is_dir() and not any(toolchain.iterdir()):
                toolchain.rmdir()
        except OSError:  # a concurrent trial just created a revision in it
            pass
    return removed


def last_used(path: Path) -> float:
    """A cache directory's last use (its mtime; now when a concurrent prune removed it)."""
    try:
        return path.stat().st_mtime
    except OSError:  # removed by a concurrent prune
        return time.time()
