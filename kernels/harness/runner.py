"""Parent side: run one trial in a fresh process and always return a result dict.

    run_harness(spec, worktree, *, import_root=".", env=None, timeout_s=900,
                caches=None, launcher="auto") -> dict

The child runs `kernels.harness` with cwd = worktree, the worktree's import root first on
PYTHONPATH and the directory holding this `kernels` package after it (so the harness stays
importable from a worker's install), and the repository's extra env merged last. It is forked
from a fork server that has already imported torch (launch.py), or started as a plain
subprocess where that is unavailable; either way one fresh process per trial, in its own
process group so a timeout kills it and anything it started.

JIT cache: `caches` (a caches.RevisionCaches) shares Triton's cache and the accuracy references
between the trials of one revision and toolchain; without it every trial gets a fresh empty
TRITON_CACHE_DIR. The result's "phases" say where the trial's time went (phases.py).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import kernels
from kernels.harness.caches import RevisionCaches
from kernels.harness.launch import LaunchRequest, start_trial
from kernels.harness.phases import close_phases
from kernels.harness.result import failure_result

# The directory that contains the `kernels` package of this install.
HARNESS_ROOT = Path(kernels.__file__).resolve().parent.parent
STDERR_TAIL = 4000


def _child_env(import_dir: Path, cache_env: dict[str, str], env: dict | None) -> dict:
    child = dict(os.environ)
    paths = [str(import_dir), str(HARNESS_ROOT)]
    if child.get("PYTHONPATH"):
        paths.append(child["PYTHONPATH"])
    child["PYTHONPATH"] = os.pathsep.join(paths)
    child.update(cache_env)
    child["PYTHONUNBUFFERED"] = "1"
    child.update({str(k): str(v) for k, v in (env or {}).items()})
    return child


def _log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - STDERR_TAIL))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def run_harness(spec: dict, worktree: Path, *, import_root: str = ".",
                env: dict[str, str] | None = None, timeout_s: float = 900,
                caches: RevisionCaches | None = None, launcher: str = "auto") -> dict:
    """Run one trial of `spec` at the checked-out `worktree`. Never raises: failures
    come back as a result with status import_error, timeout or error."""
    started = time.perf_counter()
    worktree = Path(worktree).resolve()
    try:
        with tempfile.TemporaryDirectory(prefix="perfbisect-trial-") as tmp:
            tmp_path = Path(tmp)
            spec_path, out_path, log_path = (tmp_path / name for name in
                                             ("spec.json", "result.json", "log.txt"))
            if caches is not None:
                cache_env = caches.env()
                spec = {**spec, "reference_cache": {"dir": str(caches.reference_dir),
                                                    "revision": caches.revision}}
            else:  # a cold JIT cache of this trial alone
                (tmp_path / "triton-cache").mkdir()
                cache_env = {"TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
            if not worktree.is_dir():
                raise FileNotFoundError(f"worktree {worktree} does not exist")
            import_dir = (worktree / import_root).resolve()
            launched_at = time.time()
            spec_path.write_text(json.dumps({**spec, "launched_at": launched_at}))
            request = LaunchRequest(
                args=["--spec", str(spec_path), "--out", str(out_path), "--repo-root", str(worktree)],
                cwd=worktree, env=_child_env(import_dir, cache_env, env), import_dir=import_dir,
                log=log_path)
            process = start_trial(request, launcher)
            try:
                process.wait(timeout_s)
            except TimeoutError:
                process.kill()
                return failure_result("timeout", f"trial killed after the {timeout_s:g} s timeout",
                                      wall_s=time.perf_counter() - started,
                                      cold=spec.get("cold", True))
            finally:
                process.kill()  # whatever the child left running in its group
            exited_at = time.time()
            tail = _log_tail(log_path)
            if out_path.is_file():
                result = json.loads(out_path.read_text())
                result["log_tail"] = tail or None
                result["launcher"] = process.launcher
                timeline = result.pop("timeline", None) or {}
                result["phases"] = close_phases(result.get("phases"), launched_at,
                                                timeline.get("entered_at"),
                                                timeline.get("first_sample_at"), exited_at)
                return result
            return failure_result("error", f"harness exited without a result:\n{tail}",
                                  wall_s=time.perf_counter() - started,
                                  cold=spec.get("cold", True))
    except Exception as exc:  # e.g. the worktree vanished, or a broken result file
        return failure_result("error", f"{type(exc).__name__}: {exc}",
                              wall_s=time.perf_counter() - started)
