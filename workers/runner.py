"""What a worker does for one trial, outside any database session: take a sandbox slot, check
out the revision in it, build it, run the harness in a fresh process, all contained (see
workers/sandbox.py). Every failure comes back as a result dict, redacted of the service's secrets."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from kernels.harness.runner import run_harness
from service.settings import get_settings
from service.trials.service import TrialWork
from workers.build import run_build
from workers.checkout import GitError, Mirror
from workers.redact import redact_tree
from workers.sandbox import SandboxError, Slot, slot

StopCheck = Callable[[], bool]


def worker_slot() -> str:
    """Who runs the trial: host and process id (shown with the trial; the pid finds the process)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def failure(status: str, message: str) -> dict[str, Any]:
    return {"status": status, "error": message, "cases": [], "device": None}


def device_of(device_class: str) -> str:
    return "cpu" if device_class == "cpu" else "cuda"


def harness_spec(cases: list[dict[str, Any]], device_class: str, policy: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"cases": [{k: c[k] for k in ("suite", "target", "params")} for c in cases],
                            "device": device_of(device_class), "cold": True}
    if policy:
        spec["policy"] = policy
    return spec


def run_in_slot(box: Slot, mirror: Mirror, sha: str, *, build_command: str | None, env: dict[str, str],
                spec: dict[str, Any], import_root: str,
                should_stop: StopCheck | None = None) -> tuple[dict[str, Any], float | None]:
    """Check out `sha` into the slot, build and measure it; returns (result, build seconds)."""
    settings = get_settings()
    try:
        mirror.ensure(fetch=False)
        mirror.checkout(box.worktree, sha)
    except GitError as exc:
        return failure("error", f"checkout failed: {exc}"), None
    box.give(box.worktree)
    build = run_build(build_command, box, env, settings.build_timeout_s, should_stop)
    if not build.ok:
        status = "cancelled" if build.stopped == "cancelled" else "build_error"
        return failure(status, build.log_tail), build.seconds
    # RLIMIT_AS breaks the CUDA driver's address-space reservations: cap data on GPUs instead.
    memory = "as" if spec["device"] == "cpu" else "data"
    result = run_harness(spec, box.worktree, import_root=import_root, env=env, timeout_s=settings.trial_timeout_s,
                         base_env=box.env({}), scratch_root=box.scratch, launch=box.launcher(memory, should_stop))
    return result, build.seconds


def execute(work: TrialWork, should_stop: StopCheck | None = None) -> tuple[dict[str, Any], float | None]:
    """Run one trial; returns (harness result, build seconds). `should_stop` is polled while
    repository code runs; when it says so, everything the trial started is killed."""
    settings = get_settings()
    mirror = Mirror(settings.mirrors_dir.resolve(), work.repo_name, work.repo_url)
    spec = harness_spec(work.cases, work.device_class, work.policy)
    try:
        with slot() as box:
            result, build_s = run_in_slot(box, mirror, work.sha, build_command=work.build_command, env=work.env,
                                          spec=spec, import_root=work.import_root, should_stop=should_stop)
    except SandboxError as exc:
        result, build_s = failure("error", f"sandbox: {exc}"), None
    return redact_tree(result), build_s
