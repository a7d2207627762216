"""Modules a revision's fork server imports once for all of that revision's trials.

A suite whose target package takes seconds to import (a large pure-Python library compiled
from a clean worktree in every trial) may declare it:

    PRELOAD = ["sympy"]                   # in the suite file, a literal list of module names

The fork server of that revision (launch.py) then imports these modules from the revision's
worktree before it forks, and every trial of the revision starts with them imported. The cold
rules stay: each trial is still a fresh process (a fork of the server, which never ran a
case), a server serves one revision only (its key holds the revision, and a new revision
replaces it) and nothing another revision imported or compiled is reused.

    trial_preload(spec, worktree, mode)   -> ("sympy",)  what the trial's server preloads
    declared_preload(source)              -> ("sympy",)  a suite file's PRELOAD, read without running it
    import_preloaded(names)               -> (loaded, failed)   in the server

`mode` (PERFBISECT_TRIAL_PRELOAD): "auto" follows the suites' PRELOAD, "on" adds the top-level
package of every case's target, "off" preloads nothing. Torch-free: the parent reads suite files
with `ast`, never importing them.
"""
from __future__ import annotations

import ast
import importlib
import os
import re
import sys
from pathlib import Path

from perfbisect.kernels.harness import safefs

MODES = ("auto", "on", "off")
MODE_ENV = "PERFBISECT_TRIAL_PRELOAD"
SUITE_LIMIT = 4 * 2**20  # a suite file larger than this declares no PRELOAD
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def declared_preload(source: str) -> tuple[str, ...]:
    """The module names of a suite file's top-level `PRELOAD = [...]` (a list or tuple of string
    literals). Raises ValueError on a PRELOAD that is not one, or names that are not modules."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()  # the trial reports the suite file itself
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PRELOAD" for t in node.targets):
            try:
                names = ast.literal_eval(node.value)
            except ValueError as exc:
                raise ValueError("PRELOAD must be a literal list of module names") from exc
            if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
                raise ValueError("PRELOAD must be a literal list of module names")
            bad = [n for n in names if not _MODULE.fullmatch(n)]
            if bad:
                raise ValueError(f"PRELOAD names no module: {', '.join(map(repr, bad))}")
            return tuple(names)
    return ()


def _suite_source(case: dict, spec: dict, worktree: Path) -> str | None:
    """The text of the case's custom suite file (sent with the job, or in the worktree); None
    for a built-in suite or a file that cannot be read."""
    name = case.get("suite") or ""
    if name.startswith("source:"):
        return (spec.get("suite_sources") or {}).get(case.get("source"))
    if name.startswith("file:"):
        try:  # the worktree is the repository's (its build ran there): beneath it, no symlink
            anchor = safefs.open_anchor(worktree)
            try:
                text = safefs.read_beneath(anchor, name[len("file:"):], limit=SUITE_LIMIT,
                                           owner=os.fstat(anchor).st_uid)
            finally:
                os.close(anchor)
        except OSError:
            return None
        return text.decode("utf-8", errors="replace")
    return None


def trial_preload(spec: dict, worktree: Path, mode: str = "auto") -> tuple[str, ...]:
    """What the fork server of this trial's revision imports before forking it, in order, each
    name once. A PRELOAD that cannot be read preloads nothing (the trial reports the suite)."""
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return ()
    names: list[str] = []
    for case in spec.get("cases") or []:
        source = _suite_source(case, spec, Path(worktree))
        try:
            names += declared_preload(source) if source else ()
        except ValueError:
            continue
        target = str(case.get("target") or "")
        if mode == "on" and _MODULE.fullmatch(target.partition(":")[0]):
            names.append(target.partition(":")[0].split(".")[0])
    return tuple(dict.fromkeys(names))


def import_preloaded(names: tuple[str, ...] | list[str]) -> tuple[list[str], dict[str, str]]:
    """Import `names` in this process (the fork server); a module that fails to import is
    left out and everything its attempt added to sys.modules is dropped, so that the trial
    imports it itself and reports the failure as a fresh interpreter would. Returns (loaded,
    {name: error})."""
    loaded, failed = [], {}
    for name in names:
        before = set(sys.modules)
        try:
            importlib.import_module(name)
            loaded.append(name)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a revision's code may raise anything
            for added in set(sys.modules) - before:
                del sys.modules[added]
            failed[name] = f"{type(exc).__name__}: {exc}"[:500]
    return loaded, failed
