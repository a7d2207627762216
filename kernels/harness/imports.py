"""Which files of the worktree a trial loaded (issue 43: hunk localization searches only the
hunks of those files). Standard library only."""
from __future__ import annotations

import sys
from pathlib import Path

MAX_FILES = 2000  # a bound on the list stored with every trial


def worktree_imports(repo_root: Path) -> list[str]:
    """The worktree-relative paths (posix) of the modules this process has loaded from files
    under `repo_root`, sorted; at most MAX_FILES. Built-in and namespace modules (no file) and
    files outside the worktree (torch, the harness, a suite file) are not listed."""
    root = Path(repo_root).resolve()
    found = set()
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if not isinstance(name, str):
            continue
        try:
            relative = Path(name).resolve().relative_to(root)
        except (ValueError, OSError):
            continue
        found.add(relative.as_posix())
    return sorted(found)[:MAX_FILES]
