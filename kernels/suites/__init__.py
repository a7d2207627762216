"""Benchmark suites: built-in gemm, attention, rmsnorm, the ROCm-only flydsl_attention and
flydsl_gemm (flydsl.py), and custom files.

    get_suite("gemm")                              -> GemmSuite
    get_suite("file:bench/ln_bwd.py", repo_root)   -> CustomSuite loaded from the repo
    get_suite("source:ln_bwd.py@3f2a9c1b7d0e", source_file=PATH)
                                                   -> CustomSuite loaded from a file kept outside
                                                      the repository (the same at every revision)

Importing this package does not import torch (the suites import it when they run a case).
"""
from __future__ import annotations

from pathlib import Path

from perfbisect.kernels.harness.devices import ROCM_ONLY
from perfbisect.kernels.suites.attention import AttentionSuite
from perfbisect.kernels.suites.base import Suite, resolve_callable
from perfbisect.kernels.suites.flydsl import ROCM_SUITES, rocm_unavailable
from perfbisect.kernels.suites.gemm import GemmSuite
from perfbisect.kernels.suites.rmsnorm import RmsNormSuite

BUILTIN_SUITES = {"gemm": GemmSuite, "attention": AttentionSuite, "rmsnorm": RmsNormSuite, **ROCM_SUITES}
FILE_PREFIX = "file:"
SOURCE_PREFIX = "source:"  # a suite file sent with the job, stored by sha256


class UnknownSuite(ValueError):
    """No built-in suite of that name, or a custom suite file that cannot be used."""


def get_suite(name: str, repo_root: str | Path | None = None, source_file: str | Path | None = None) -> Suite:
    """Resolve a suite name. Raises UnknownSuite (a ValueError) with a message.

    A custom file ('file:relative/path.py' inside repo_root, or 'source:...' at `source_file`)
    is imported, which runs its code: only call this in a trial's process.
    """
    if name in BUILTIN_SUITES:
        return BUILTIN_SUITES[name]()
    custom = isinstance(name, str) and name.startswith((FILE_PREFIX, SOURCE_PREFIX))
    if not custom:
        known = ", ".join(sorted(BUILTIN_SUITES))
        raise UnknownSuite(f"unknown suite {name!r}: use one of {known} or 'file:path/in/repo.py'")
    from perfbisect.kernels.suites.custom import CustomSuite, import_suite_file, load_suite_file

    try:
        if name.startswith(SOURCE_PREFIX):
            if source_file is None:
                raise UnknownSuite(f"suite {name!r} needs its file (sent with the job) to load")
            return CustomSuite(name, import_suite_file(Path(source_file)))
        if repo_root is None:
            raise UnknownSuite(f"custom suite {name!r} needs the repository checkout to load")
        return CustomSuite(name, load_suite_file(Path(repo_root), name[len(FILE_PREFIX):]))
    except UnknownSuite:
        raise
    except ValueError as exc:
        raise UnknownSuite(str(exc)) from exc


def suite_vendor(name: str) -> str | None:
    """The GPU vendor a built-in suite needs ("amd" for the FlyDSL suites), None for any device."""
    suite = BUILTIN_SUITES.get(name)
    return getattr(suite, "vendor", None) if suite else None


def suite_availability(vendor: str | None) -> dict[str, str | None]:
    """Per built-in suite: None when this process can run it, else why not (imports torch)."""
    rocm_reason = rocm_unavailable() if vendor == "amd" else None
    found = {}
    for name in BUILTIN_SUITES:
        needs = suite_vendor(name)
        found[name] = None if needs is None else (rocm_reason if vendor == needs else
                                                  f"{ROCM_ONLY} (this host: {vendor or 'no GPU'})")
    return found


__all__ = ["BUILTIN_SUITES", "FILE_PREFIX", "SOURCE_PREFIX", "Suite", "UnknownSuite", "get_suite", "resolve_callable",
           "suite_availability", "suite_vendor"]
