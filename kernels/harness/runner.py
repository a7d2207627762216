"""Parent side: run one trial in a fresh subprocess and always return a result dict.

    run_harness(spec, worktree, *, import_root=".", env=None, timeout_s=900) -> dict

The child is `python -m kernels.harness` with cwd = worktree, the worktree's import
root first on PYTHONPATH and the directory holding this `kernels` package after it
(so the harness stays importable from a worker's install), a fresh empty
TRITON_CACHE_DIR (cold JIT), and the repository's extra env merged last. The child
runs in its own process group so a timeout kills it and anything it started; a worker passes
its own launcher (workers/sandbox.py), which also kills what escaped the group.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import kernels
from kernels.harness.result import failure_result

# The directory that contains the `kernels` package of this install.
HARNESS_ROOT = Path(kernels.__file__).resolve().parent.parent
STDERR_TAIL = 4000


def _child_env(worktree: Path, import_root: str, cache_dir: Path, env: dict | None,
               base_env: dict | None = None) -> dict:
    child = dict(os.environ if base_env is None else base_env)
    paths = [str((worktree / import_root).resolve()), str(HARNESS_ROOT)]
    if child.get("PYTHONPATH"):
        paths.append(child["PYTHONPATH"])
    child["PYTHONPATH"] = os.pathsep.join(paths)
    child["TRITON_CACHE_DIR"] = str(cache_dir)
    child["PYTHONUNBUFFERED"] = "1"
    child.update({str(k): str(v) for k, v in (env or {}).items()})
    return child


@dataclass(frozen=True)
class Launched:
    """How the child ended: its exit code (None when it was killed), the tail of its output,
    and why it was stopped early ("timeout" or another reason such as "cancelled")."""

    returncode: int | None
    output_tail: str
    stopped: str | None = None


# launch(cmd, cwd, env, timeout_s, scratch) -> Launched. A worker passes its sandbox here.
Launcher = Callable[[list[str], Path, dict, float, Path], Launched]


def launch_local(cmd: list[str], cwd: Path, env: dict, timeout_s: float, scratch: Path) -> Launched:
    """The default launcher (`perfbisect measure`, tests): a new session killed as a group. The
    output goes to a file, never a pipe, so a process that escapes the group while holding
    stdout cannot make the wait outlive the timeout."""
    log_path = scratch / "output.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        stopped = None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stopped = "timeout"
        finally:
            _kill_group(proc)  # whatever the child left running in its group
            proc.wait()
    return Launched(None if stopped else proc.returncode, read_tail(log_path), stopped)


def read_tail(path: Path, limit: int = STDERR_TAIL) -> str:
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - limit))
        return handle.read().decode(errors="replace")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # the group is already gone
        pass


def run_harness(spec: dict, worktree: Path, *, import_root: str = ".",
                env: dict[str, str] | None = None, timeout_s: float = 900,
                base_env: dict[str, str] | None = None, scratch_root: Path | None = None,
                launch: Launcher = launch_local) -> dict:
    """Run one trial of `spec` at the checked-out `worktree`. Never raises: failures
    come back as a result with status import_error, timeout or error.

    `base_env` replaces os.environ as the child's starting environment, `scratch_root` is where
    its temporary directory goes, and `launch` starts and waits for it (a worker's sandbox)."""
    started = time.perf_counter()
    worktree = Path(worktree).resolve()
    cold = spec.get("cold", True)
    try:
        with tempfile.TemporaryDirectory(prefix="perfbisect-trial-", dir=scratch_root) as tmp:
            tmp_path = Path(tmp)
            spec_path, out_path = tmp_path / "spec.json", tmp_path / "result.json"
            cache_dir = tmp_path / "triton-cache"
            cache_dir.mkdir()
            spec_path.write_text(json.dumps(spec))
            cmd = [sys.executable, "-m", "kernels.harness", "--spec", str(spec_path),
                   "--out", str(out_path), "--repo-root", str(worktree)]
            child_env = _child_env(worktree, import_root, cache_dir, env, base_env)
            launched = launch(cmd, worktree, child_env, timeout_s, tmp_path)
            wall_s = time.perf_counter() - started
            if launched.stopped == "timeout":
                return failure_result("timeout", f"trial killed after the {timeout_s:g} s timeout",
                                      wall_s=wall_s, cold=cold)
            if launched.stopped:
                return failure_result("error", f"trial stopped: {launched.stopped}", wall_s=wall_s, cold=cold)
            tail = launched.output_tail
            if out_path.is_file():
                result = json.loads(out_path.read_text())
                result["log_tail"] = tail or None
                return result
            return failure_result("error", f"harness exited with code {launched.returncode} "
                                  f"without a result:\n{tail}", wall_s=wall_s, cold=cold)
    except Exception as exc:  # e.g. the worktree vanished, or a broken result file
        return failure_result("error", f"{type(exc).__name__}: {exc}",
                              wall_s=time.perf_counter() - started)
