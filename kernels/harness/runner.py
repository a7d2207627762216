"""Parent side: run one trial in a fresh subprocess and always return a result dict.

    run_harness(spec, worktree, *, import_root=".", env=None, timeout_s=900) -> dict

The child is `python -m kernels.harness` with cwd = worktree, the worktree's import
root first on PYTHONPATH and the directory holding this `kernels` package after it
(so the harness stays importable from a worker's install), a fresh empty
TRITON_CACHE_DIR (cold JIT), and the repository's extra env merged last. The child
runs in its own process group so a timeout kills it and anything it started.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kernels
from kernels.harness.result import failure_result

# The directory that contains the `kernels` package of this install.
HARNESS_ROOT = Path(kernels.__file__).resolve().parent.parent
STDERR_TAIL = 4000


def _child_env(worktree: Path, import_root: str, cache_dir: Path, env: dict | None) -> dict:
    child = dict(os.environ)
    paths = [str((worktree / import_root).resolve()), str(HARNESS_ROOT)]
    if child.get("PYTHONPATH"):
        paths.append(child["PYTHONPATH"])
    child["PYTHONPATH"] = os.pathsep.join(paths)
    child["TRITON_CACHE_DIR"] = str(cache_dir)
    child["PYTHONUNBUFFERED"] = "1"
    child.update({str(k): str(v) for k, v in (env or {}).items()})
    return child


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # the group is already gone
        pass


def run_harness(spec: dict, worktree: Path, *, import_root: str = ".",
                env: dict[str, str] | None = None, timeout_s: float = 900) -> dict:
    """Run one trial of `spec` at the checked-out `worktree`. Never raises: failures
    come back as a result with status import_error, timeout or error."""
    started = time.perf_counter()
    worktree = Path(worktree).resolve()
    try:
        with tempfile.TemporaryDirectory(prefix="perfbisect-trial-") as tmp:
            tmp_path = Path(tmp)
            spec_path, out_path = tmp_path / "spec.json", tmp_path / "result.json"
            cache_dir = tmp_path / "triton-cache"
            cache_dir.mkdir()
            spec_path.write_text(json.dumps(spec))
            cmd = [sys.executable, "-m", "kernels.harness", "--spec", str(spec_path),
                   "--out", str(out_path), "--repo-root", str(worktree)]
            proc = subprocess.Popen(cmd, cwd=worktree, env=_child_env(worktree, import_root,
                                    cache_dir, env), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                output, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.communicate()
                return failure_result("timeout", f"trial killed after the {timeout_s:g} s timeout",
                                      wall_s=time.perf_counter() - started,
                                      cold=spec.get("cold", True))
            finally:
                _kill_group(proc)  # whatever the child left running in its group
            tail = output.decode(errors="replace")[-STDERR_TAIL:]
            if out_path.is_file():
                result = json.loads(out_path.read_text())
                result["log_tail"] = tail or None
                return result
            return failure_result("error", f"harness exited with code {proc.returncode} "
                                  f"without a result:\n{tail}",
                                  wall_s=time.perf_counter() - started,
                                  cold=spec.get("cold", True))
    except Exception as exc:  # e.g. the worktree vanished, or a broken result file
        return failure_result("error", f"{type(exc).__name__}: {exc}",
                              wall_s=time.perf_counter() - started)
