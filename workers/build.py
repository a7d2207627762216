"""Run a repository's registered build command in a checked-out revision."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    seconds: float
    log_tail: str


def run_build(command: str | None, worktree: Path, env: dict[str, str], timeout_s: float) -> BuildResult:
    """Run `command` with a shell in `worktree` (it is the registered repository's own command,
    never text from a job). A non-zero exit or the timeout is a failed build, not an exception."""
    if not command:
        return BuildResult(True, 0.0, "")
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, shell=True, cwd=worktree, env={**os.environ, **env}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return BuildResult(False, time.perf_counter() - start, f"build timed out after {timeout_s:.0f}s\n{out[-2000:]}")
    ok = proc.returncode == 0
    tail = out[-2000:] if not ok else out[-500:]
    if not ok:
        tail = f"build command exited {proc.returncode}\n{tail}"
    return BuildResult(ok, time.perf_counter() - start, tail)
