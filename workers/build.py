"""Run a repository's registered build command in a checked-out revision, contained in the
trial's sandbox slot (workers/sandbox.py).

A revision that must be installed or compiled before it imports installs into its own build
directory, `BUILD_DIR` inside the worktree (wiped with the worktree, so no revision sees another's
build): the command may name it as `{build_dir}` (or `$PERFBISECT_BUILD_DIR`) and the worker's
interpreter as `{python}`, e.g. `{python} -m pip install --no-deps --no-build-isolation --target
{build_dir} .`, and the repository's import root is then `.perfbisect-build`.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfbisect.gitrepo import GitError, Mirror
from perfbisect.kernels.harness import procfs
from perfbisect.kernels.harness.caches import toolchain_fingerprint
from perfbisect.service.settings import Settings, get_settings
from perfbisect.workers import buildcache
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
    cache: dict[str, Any] | None = None  # what the build cache did; None where no inputs are declared


def run_build(command: str | None, slot: Slot, env: dict[str, str], timeout_s: float,
              should_stop: Callable[[], bool] | None = None, network: bool = False) -> BuildResult:
    """Run `command` with a shell in the slot's worktree (it is the registered repository's own
    command, never text from a job), with the slot's scrubbed environment plus `env`, with the
    network only when `network` (the repository's opt-in). A non-zero exit, the timeout or a
    stop is a failed build, not an exception."""
    if not command:
        return BuildResult(True, 0.0, "")
    start = time.perf_counter()
    build_env = {**env, "PERFBISECT_BUILD_DIR": str(slot.worktree / BUILD_DIR), "PERFBISECT_PYTHON": sys.executable}
    done = slot.run(build_command_for(command, slot.worktree), cwd=slot.worktree, env=slot.env(build_env),
                    timeout_s=timeout_s, memory="data", should_stop=should_stop, network=network)
    seconds = time.perf_counter() - start
    tail = done.output_tail[-LOG_TAIL:]
    if done.stopped == "timeout":
        return BuildResult(False, seconds, f"build timed out after {timeout_s:.0f}s\n{tail}", done.stopped)
    if done.stopped:
        return BuildResult(False, seconds, f"build stopped: {done.stopped}\n{tail}", done.stopped)
    if done.returncode != 0:
        return BuildResult(False, seconds, f"build command exited {done.returncode}\n{tail}")
    return BuildResult(True, seconds, tail[-500:])


def build_cache_root(settings: Settings) -> Path:
    return settings.home.resolve() / "build-cache"


def gpu_models() -> list[str]:
    """The NVIDIA GPUs of this host as the driver names them (an extension compiled for the
    visible GPU's architecture must not be served to another)."""
    return [fields["Model"] for fields in procfs.nvidia_gpus() if "Model" in fields]


def build_toolchain(build_env: dict[str, str], device: str) -> dict[str, Any]:
    """What besides its inputs a build's output depends on: the interpreter, torch, triton and
    driver, the device, and the environment the command runs with (the slot's own HOME and
    TMPDIR left out: they differ between slots, not between builds)."""
    env = {k: v for k, v in build_env.items() if k not in ("HOME", "TMPDIR")}
    return {"toolchain": toolchain_fingerprint(), "device": device, "gpus": gpu_models(), "env": sorted(env.items())}


def build_revision(command: str | None, inputs: Sequence[str], slot: Slot, mirror: Mirror, sha: str, *,
                   env: dict[str, str], device: str, should_stop: Callable[[], bool] | None = None,
                   network: bool = False) -> BuildResult:
    """Build `sha` in the slot's worktree: from the build cache when the repository declares its
    build inputs and an entry has their key, else by running the command (and then storing its
    output, unless it failed or copied undeclared files). The result's `cache` says which."""
    settings = get_settings()
    if not command or not inputs:
        return run_build(command, slot, env, settings.build_timeout_s, should_stop, network)
    try:
        entries = mirror.tree_entries(sha)
    except GitError as exc:
        built = run_build(command, slot, env, settings.build_timeout_s, should_stop, network)
        return replace(built, cache={"cached": False, "stored": False, "note": f"not cached: {exc}"})
    declared = buildcache.declared_files(entries, inputs)
    key = buildcache.build_key(command, build_toolchain(slot.env(env), device), inputs, declared)
    root = build_cache_root(settings)
    hit = _restored(root, key, slot)
    if hit is not None:
        return hit
    built = run_build(command, slot, env, settings.build_timeout_s, should_stop, network)
    if not built.ok:
        return replace(built, cache={"key": key, "cached": False, "stored": False, "note": "build failed: not cached"})
    meta = {"key": key, "built_for": sha, "seconds": round(built.seconds, 3), "at": time.time()}
    refused = buildcache.store(root, key, slot.worktree, BUILD_DIR, meta, owner=_uid(slot),
                               refuse=lambda copy: _uncacheable(copy, slot.worktree, entries, declared))
    buildcache.prune(root, settings.build_cache_keep, protect=key)
    if refused is None:
        note = f"built in {built.seconds:.1f} s, cached as key {key[:12]}"
    else:
        note = f"built in {built.seconds:.1f} s, not cached: {refused}"
    return replace(built, cache={"key": key, "cached": False, "stored": refused is None, "note": note})


def _uid(slot: Slot) -> int:
    """Whose files a build output of `slot` holds: its user's (the worker's where it has none)."""
    return slot.user.uid if slot.user else os.geteuid()


def _restored(root: Path, key: str, slot: Slot) -> BuildResult | None:
    """The cache hit for `key`, copied into the slot's build directory as its user's; None on a
    miss (or an entry pruned under the copy)."""
    started = time.perf_counter()
    meta = buildcache.lookup(root, key)
    if meta is None:
        return None
    give = (slot.user.uid, slot.user.gid) if slot.user else None
    try:
        buildcache.restore(root, key, slot.worktree, BUILD_DIR, give)
    except OSError:  # the partial copy is gone too
        return None
    seconds = time.perf_counter() - started
    note = (f"cached (key {key[:12]}, built for {str(meta.get('built_for'))[:10]} "
            f"in {float(meta.get('seconds') or 0):.1f} s)")
    return BuildResult(True, seconds, note, cache={"key": key, "cached": True, "built_for": meta.get("built_for"),
                                                   "built_s": meta.get("seconds"), "note": note})


def _uncacheable(build_dir: Path, worktree: Path, entries: Sequence, declared: Sequence) -> str | None:
    """Why this build's output (the worker's copy of it, `build_dir`) must not be served to
    another revision, or None."""
    copied = buildcache.undeclared_copies(build_dir, entries, declared)
    if copied:
        more = f" (+{len(copied) - 3} more)" if len(copied) > 3 else ""
        return (f"the output holds copies of files that are not declared build inputs: "
                f"{', '.join(copied[:3])}{more}; declare them")
    pinned = buildcache.names_worktree(build_dir, worktree)
    if pinned:
        return f"{', '.join(pinned[:3])} names the worktree's path: the output is not relocatable"
    return None
