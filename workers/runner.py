"""What a worker does for one trial, outside any database session: check out the revision,
build it, run the harness in a fresh process. Every failure comes back as a result dict."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any

from kernels.harness.runner import run_harness
from service.settings import get_settings
from service.trials.service import TrialWork
from workers.build import run_build
from workers.checkout import GitError, Mirror


def worker_slot() -> str:
    """Who runs the trial: host and process id (shown with the trial; the pid finds the process)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def worktree_slot() -> str:
    """One worktree per worker process and thread: two trials never share a checkout (the
    embedded mode runs several trials in one process)."""
    return f"{worker_slot()}-{threading.get_native_id()}"


def failure(status: str, message: str) -> dict[str, Any]:
    return {"status": status, "error": message, "cases": [], "device": None}


def device_of(device_class: str) -> str:
    return "cpu" if device_class == "cpu" else "cuda"


def execute(work: TrialWork) -> tuple[dict[str, Any], float | None]:
    """Run one trial; returns (harness result, build seconds)."""
    settings = get_settings()
    mirror = Mirror(settings.mirrors_dir, work.repo_name, work.repo_url)
    worktree = settings.worktrees_dir.resolve() / work.repo_name / worktree_slot()
    try:
        mirror.ensure(fetch=False)
        mirror.checkout(worktree, work.sha)
    except GitError as exc:
        return failure("error", f"checkout failed: {exc}"), None
    build = run_build(work.build_command, worktree, work.env, settings.build_timeout_s)
    if not build.ok:
        return failure("build_error", build.log_tail), build.seconds
    spec: dict[str, Any] = {"cases": [{k: c[k] for k in ("suite", "target", "params")} for c in work.cases],
                            "device": device_of(work.device_class), "cold": True}
    if work.policy:
        spec["policy"] = work.policy
    if work.accuracy_only:
        spec["accuracy_only"] = True
    result = run_harness(spec, Path(worktree), import_root=work.import_root, env=work.env,
                         timeout_s=settings.trial_timeout_s)
    return result, build.seconds
