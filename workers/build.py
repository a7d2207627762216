"""Run a repository's registered build command in a checked-out revision, contained in the
trial's sandbox slot (workers/sandbox.py).

A revision that must be installed or compiled before it imports installs into its own build
directory, `BUILD_DIR` inside the worktree (wiped with the worktree, so no revision sees another's
build): the command may name it as `{build_dir}` (or `$PERFBISECT_BUILD_DIR`) and the worker's
interpreter as `{python}`, e.g. `{python} -m pip install --no-deps --no-build-isolation --target
{build_dir} .`, and the repository's import root is then `.perfbisect-build`.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfbisect.workers.sandbox import Slot

LOG_TAIL = 2000
BUILD_DIR = ".perfbisect-build"


def build_command_for(command: str, worktree: Path) -> str:
    """The command with its placeholders filled in (quoted for the shell)."""
    return (command.replace("{build_dir}", shlex.quote(str(worktree / BUILD_DIR)))
            .replace("{python}", shlex.quote(sys.executable)))


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    seconds: float
    log_tail: str
    stopped: str | None = None


def run_build(command: str | None, slot: Slot, env: dict[str, str], timeout_s: float,
              should_stop: Callable[[], bool] | None = None) -> BuildResult:
    """Run `command` with a shell in the slot's worktree (it is the registered repository's own
    command, never text from a job), with the slot's scrubbed environment plus `env`. A non-zero
    exit, the timeout or a stop is a failed build, not an exception."""
    if not command:
        return BuildResult(True, 0.0, "")
    start = time.perf_counter()
    build_env = {**env, "PERFBISECT_BUILD_DIR": str(slot.worktree / BUILD_DIR), "PERFBISECT_PYTHON": sys.executable}
    done = slot.run(build_command_for(command, slot.worktree), cwd=slot.worktree, env=slot.env(build_env),
                    timeout_s=timeout_s, memory="data", should_stop=should_stop)
    seconds = time.perf_counter() - start
    tail = done.output_tail[-LOG_TAIL:]
    if done.stopped == "timeout":
        return BuildResult(False, seconds, f"build timed out after {timeout_s:.0f}s\n{tail}", done.stopped)
    if done.stopped:
        return BuildResult(False, seconds, f"build stopped: {done.stopped}\n{tail}", done.stopped)
    if done.returncode != 0:
        return BuildResult(False, seconds, f"build command exited {done.returncode}\n{tail}")
    return BuildResult(True, seconds, tail[-500:])
