"""Benchmark suites: built-in gemm, attention, rmsnorm, and custom files.

    get_suite("gemm")                              -> GemmSuite
    get_suite("file:bench/ln_bwd.py", repo_root)   -> CustomSuite loaded from the repo
"""
from __future__ import annotations

from pathlib import Path

from perfbisect.kernels.suites.attention import AttentionSuite
from perfbisect.kernels.suites.base import Suite, resolve_callable
from perfbisect.kernels.suites.gemm import GemmSuite
from perfbisect.kernels.suites.rmsnorm import RmsNormSuite

BUILTIN_SUITES = {"gemm": GemmSuite, "attention": AttentionSuite, "rmsnorm": RmsNormSuite}
FILE_PREFIX = "file:"


class UnknownSuite(ValueError):
    """No built-in suite of that name, or a custom suite file that cannot be used."""


def get_suite(name: str, repo_root: str | Path | None = None) -> Suite:
    """Resolve a suite name. Raises UnknownSuite (a ValueError) with a message.

    A custom file ('file:relative/path.py') is imported, which runs its code: only call
    this with repo_root set to a checked-out, registered repository.
    """
    if name in BUILTIN_SUITES:
        return BUILTIN_SUITES[name]()
    if isinstance(name, str) and name.startswith(FILE_PREFIX):
        if repo_root is None:
            raise UnknownSuite(f"custom suite {name!r} needs the repository checkout to load")
        from perfbisect.kernels.suites.custom import CustomSuite, load_suite_file
        relpath = name[len(FILE_PREFIX):]
        try:
            return CustomSuite(name, load_suite_file(Path(repo_root), relpath))
        except UnknownSuite:
            raise
        except ValueError as exc:
            raise UnknownSuite(str(exc)) from exc
    known = ", ".join(sorted(BUILTIN_SUITES))
    raise UnknownSuite(f"unknown suite {name!r}: use one of {known} or 'file:path/in/repo.py'")


__all__ = ["BUILTIN_SUITES", "Suite", "UnknownSuite", "get_suite", "resolve_callable"]
