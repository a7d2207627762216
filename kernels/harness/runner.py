"""Parent side: run one trial in a fresh process and always return a result dict.

    run_harness(spec, worktree, *, import_root=".", env=None, timeout_s=900, caches=None,
                launcher="auto", base_env=None, scratch_root=None, launch=None) -> dict

The child runs `perfbisect.kernels.harness` with cwd = worktree, the worktree's import root first
on sys.path (ahead of the worktree itself: a flat layout's sources must not shadow what its build
put in the import root) and the directory holding this `perfbisect` package after it (so the harness stays
importable from a worker's install), and the repository's extra env merged last. Two ways to
start it, one fresh process per trial either way:
- `launch` given (a worker's sandbox, workers/sandbox.py): started and contained by it (scrubbed
  env, unprivileged user, memory cap, the whole process tree killed at the timeout or on
  cancel), forked from a fork server running under that containment or a subprocess;
- otherwise (`perfbisect measure`, tests): forked from a fork server of this process's user
  that has already imported torch (launch.py), or a plain subprocess, in its own
  process group.

JIT cache: `caches` (a caches.RevisionCaches) shares Triton's cache and the accuracy references
between the trials of one revision and toolchain; without it every trial gets a fresh empty
TRITON_CACHE_DIR. The result's "phases" say where the trial's time went (phases.py).

Preload: with `caches` (which name the revision), a suite that declares PRELOAD (preload.py)
has its trials forked from a fork server of that revision which imported those modules from the
worktree once; `preload` ("auto", "on", "off", PERFBISECT_TRIAL_PRELOAD) says whether, and the
result's "preloaded" lists what a trial started with.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import perfbisect
from perfbisect.kernels.harness import safefs
from perfbisect.kernels.harness.caches import RevisionCaches
from perfbisect.kernels.harness.launch import LaunchRequest, start_trial
from perfbisect.kernels.harness.phases import close_phases
from perfbisect.kernels.harness.preload import trial_preload
from perfbisect.kernels.harness.result import failure_result

# The directory that contains the `perfbisect` package of this install (site-packages, or the
# checkout, whose perfbisect/__init__.py maps the top-level folders into the package).
HARNESS_ROOT = Path(perfbisect.__file__).resolve().parent.parent
STDERR_TAIL = 4000
RESULT_FILE = "result.json"
RESULT_LIMIT = 256 * 2**20  # far above a trial's samples; a larger file is not parsed by the worker


def _child_env(import_dir: Path, cache_env: dict[str, str], env: dict | None, base_env: dict | None = None) -> dict:
    """The trial's environment: `base_env` (else this process's), the caches', then the
    repository's `env`, whose PYTHONPATH comes after the import root and the harness (it adds
    directories; it never hides the harness or the repository's own code)."""
    child = dict(os.environ if base_env is None else base_env)
    extra = {str(k): str(v) for k, v in (env or {}).items()}
    paths = [str(import_dir), str(HARNESS_ROOT), extra.pop("PYTHONPATH", ""), child.get("PYTHONPATH", "")]
    child["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    child.update(cache_env)
    child["PYTHONUNBUFFERED"] = "1"
    child.update(extra)
    return child


def _write_suite_sources(spec: dict, folder: Path) -> dict:
    """The suite files sent with the job (spec["suite_sources"], sha256 -> text) written into the
    trial's own directory, outside the worktree: the child imports them from spec["suite_files"]."""
    sources = spec.get("suite_sources") or {}
    if not sources:
        return spec
    folder.mkdir()
    files = {}
    for sha, content in sources.items():
        path = folder / f"suite_{sha[:16]}.py"
        path.write_text(content, encoding="utf-8")
        files[sha] = str(path)
    return {**{k: v for k, v in spec.items() if k != "suite_sources"}, "suite_files": files}


@dataclass(frozen=True)
class Launched:
    """How the child ended: its exit code (None when it was killed), the tail of its output,
    and why it was stopped early ("timeout" or another reason such as "cancelled")."""

    returncode: int | None
    output_tail: str
    stopped: str | None = None
    how: str = "sandbox"      # how it was started, the result's "launcher"
    preloaded: tuple[str, ...] = ()  # the revision's modules its fork server had imported


# launch(request, timeout_s, scratch) -> Launched. A worker passes its sandbox here.
Launcher = Callable[[LaunchRequest, float, Path], Launched]


def read_tail(path: Path, limit: int = STDERR_TAIL) -> str:
    """The last `limit` bytes of the log file `path` (never through a symlink, never a FIFO)."""
    return safefs.read_tail(path, limit).decode(errors="replace")


@contextmanager
def _trial_dir(scratch_root: Path | None) -> Iterator[Path]:
    """A fresh directory for one trial's spec, result and log, removed afterwards from the fd of
    the directory above (the trial may have left symlinks or a tree deeper than rmtree goes)."""
    path = Path(tempfile.mkdtemp(prefix="perfbisect-trial-", dir=scratch_root))
    try:
        yield path
    finally:
        anchor = safefs.open_anchor(path.parent)
        try:
            safefs.remove_tree(anchor, path.name)
        except OSError:  # a mount point: the slot wipe logs it
            pass
        finally:
            os.close(anchor)


def read_result(trial_dir: Path) -> bytes | None:
    """The trial's result file in `trial_dir`, or None when it wrote none. The trial's code may
    have written there (a worker's sandbox gives the directory to the slot's user): the file is
    reached from the fd of the directory above, with no symlink on the way, and must be a regular
    file of whoever owns `trial_dir`, at most RESULT_LIMIT bytes (safefs.read_beneath). Raises
    safefs.Unsafe otherwise."""
    anchor = safefs.open_anchor(trial_dir.parent)
    try:
        folder = safefs.open_beneath(anchor, trial_dir.name)
    finally:
        os.close(anchor)
    try:
        return safefs.read_beneath(folder, RESULT_FILE, limit=RESULT_LIMIT, owner=os.fstat(folder).st_uid)
    except FileNotFoundError:
        return None
    finally:
        os.close(folder)


def _launch_forked(request: LaunchRequest, launcher: str, timeout_s: float) -> tuple[Launched, str]:
    """The fork server (or a plain subprocess), its process group killed when it is done."""
    process = start_trial(request, launcher)
    stopped = None
    try:
        process.wait(timeout_s)
    except TimeoutError:
        stopped = "timeout"
    finally:
        process.kill()  # whatever the child left running in its group
    try:
        tail = read_tail(request.log)
    except OSError:
        tail = ""
    return Launched(None, tail, stopped, preloaded=getattr(process, "preloaded", ())), process.launcher


def run_harness(spec: dict, worktree: Path, *, import_root: str = ".",
                env: dict[str, str] | None = None, timeout_s: float = 900,
                caches: RevisionCaches | None = None, launcher: str = "auto",
                base_env: dict[str, str] | None = None, scratch_root: Path | None = None,
                launch: Launcher | None = None, preload: str = "auto") -> dict:
    """Run one trial of `spec` at the checked-out `worktree`. Never raises: failures
    come back as a result with status import_error, timeout or error.

    `base_env` replaces os.environ as the child's starting environment, `scratch_root` is where
    its temporary directory goes, and `launch` starts, contains and waits for it (a worker's
    sandbox); without `launch`, `launcher` picks the fork server or a subprocess. `preload`: the
    PERFBISECT_TRIAL_PRELOAD mode (preload.py)."""
    started = time.perf_counter()
    worktree = Path(worktree).resolve()
    cold = spec.get("cold", True)
    try:
        with _trial_dir(scratch_root) as tmp_path:
            spec_path, out_path, log_path = (tmp_path / name for name in ("spec.json", RESULT_FILE, "log.txt"))
            if caches is not None:
                cache_env = caches.env()
                spec = {**spec, "reference_cache": {"dir": str(caches.reference_dir), "revision": caches.revision}}
            else:  # a cold JIT cache of this trial alone
                (tmp_path / "triton-cache").mkdir()
                cache_env = {"TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
            if not worktree.is_dir():
                raise FileNotFoundError(f"worktree {worktree} does not exist")
            modules = trial_preload(spec, worktree, preload)
            spec = _write_suite_sources(spec, tmp_path / "suites")
            import_dir = (worktree / import_root).resolve()
            launched_at = time.time()
            spec_path.write_text(json.dumps({**spec, "launched_at": launched_at}))
            args = ["--spec", str(spec_path), "--out", str(out_path), "--repo-root", str(worktree),
                    "--import-dir", str(import_dir)]
            child_env = _child_env(import_dir, cache_env, env, base_env)
            request = LaunchRequest(args=args, cwd=worktree, env=child_env, import_dir=import_dir, log=log_path,
                                    preload=modules, revision=caches.revision if caches is not None else None)
            if launch is not None:
                launched = launch(request, timeout_s, tmp_path)
                how = launched.how
            else:
                launched, how = _launch_forked(request, launcher, timeout_s)
            exited_at = time.time()
            wall_s = time.perf_counter() - started
            if launched.stopped == "timeout":
                return failure_result("timeout", f"trial killed after the {timeout_s:g} s timeout",
                                      wall_s=wall_s, cold=cold)
            if launched.stopped:
                return failure_result("error", f"trial stopped: {launched.stopped}", wall_s=wall_s, cold=cold)
            tail = launched.output_tail
            try:
                raw = read_result(tmp_path)
            except safefs.Unsafe as exc:
                return failure_result("error", f"the trial's result file was refused ({exc.strerror}):\n{tail}",
                                      wall_s=wall_s, cold=cold)
            if raw is not None:
                result = json.loads(raw)
                result["log_tail"] = tail or None
                result["launcher"] = how
                if launched.preloaded:
                    result["preloaded"] = list(launched.preloaded)
                timeline = result.pop("timeline", None) or {}
                result["phases"] = close_phases(result.get("phases"), launched_at, timeline.get("entered_at"),
                                                timeline.get("first_sample_at"), exited_at)
                return result
            code = "" if launched.returncode is None else f" with code {launched.returncode}"
            return failure_result("error", f"harness exited{code} without a result:\n{tail}", wall_s=wall_s, cold=cold)
    except Exception as exc:  # e.g. the worktree vanished, or a broken result file
        return failure_result("error", f"{type(exc).__name__}: {exc}", wall_s=time.perf_counter() - started)
