"""Run a repository's registered build command in a checked-out revision, contained in the
trial's sandbox slot (workers/sandbox.py).

A revision that must be installed or compiled before it imports installs into its own build
directory, `BUILD_DIR` inside the worktree (wiped with the worktree, so no revision sees another's
build): the command may name it as `{build_dir}` (or `$PERFBISECT_BUILD_DIR`) and the worker's
interpreter as `{python}`, e.g. `{python} -m pip install --no-deps --no-build-isolation --target
{build_dir} .`, and the repository's import root is then `.perfbisect-build`.

A command that names `{build_tree}` (or `$PERFBISECT_BUILD_TREE`) opts in to incremental builds
(workers/buildtree.py): a tree of intermediate objects kept per slot, repository and toolchain,
and a compiler cache; a build that fails on a reused tree is retried once from an empty one.
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
from perfbisect.workers import buildcache, buildtree
from perfbisect.workers.sandbox import Slot

LOG_TAIL = 2000
BUILD_DIR = ".perfbisect-build"


def build_command_for(command: str, worktree: Path) -> str:
    """The command with its placeholders filled in (quoted for the shell)."""
    return (command.replace("{build_dir}", shlex.quote(str(worktree / BUILD_DIR)))
            .replace("{build_tree}", shlex.quote(str(worktree.parent / buildtree.TREE)))
            .replace("{python}", shlex.quote(sys.executable)))


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    seconds: float
    log_tail: str
    stopped: str | None = None
    cache: dict[str, Any] | None = None  # what the build cache did; None where no inputs are declared


def run_build(command: str | None, slot: Slot, env: dict[str, str], timeout_s: float,
              should_stop: Callable[[], bool] | None = None, network: bool = False,
              lease: buildtree.Lease | None = None) -> BuildResult:
    """Run `command` with a shell in the slot's worktree (it is the registered repository's own
    command, never text from a job), with the slot's scrubbed environment plus `env`, with the
    network only when `network` (the repository's opt-in), in the build tree and with the
    compiler cache of `lease` where given. A non-zero exit, the timeout or a stop is a failed
    build, not an exception."""
    if not command:
        return BuildResult(True, 0.0, "")
    start = time.perf_counter()
    build_env = {**env, "PERFBISECT_BUILD_DIR": str(slot.worktree / BUILD_DIR), "PERFBISECT_PYTHON": sys.executable}
    shell = build_command_for(command, slot.worktree)
    if lease is not None:
        build_env.update(lease.env(slot.worktree, get_settings().build_ccache_max_mb))
        shell = lease.wrap(shell)
    done = slot.run(shell, cwd=slot.worktree, env=slot.env(build_env),
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
                   network: bool = False, dependencies: Sequence[str] = ()) -> BuildResult:
    """Build `sha` in the slot's worktree: from the build cache when the repository declares its
    build inputs and an entry has their key (with the commits of the `dependencies` placed in
    the worktree, "name=sha"), else by running the command (and then storing its output, unless
    it failed or copied undeclared files). The result's `cache` says which."""
    settings = get_settings()
    build = BuildPlan(command, slot, env, device, should_stop, network)
    if not command or not inputs:
        return build.run(mirror, sha)
    try:
        entries = mirror.tree_entries(sha)
    except GitError as exc:
        built = build.run(mirror, sha)
        return replace(built, cache={**(built.cache or {}), "cached": False, "stored": False,
                                     "note": f"not cached: {exc}"})
    declared = buildcache.declared_files(entries, inputs)
    key = buildcache.build_key(command, build_toolchain(slot.env(env), device), inputs, declared, dependencies)
    root = build_cache_root(settings)
    hit = _restored(root, key, slot)
    if hit is not None:
        return hit
    built = build.run(mirror, sha, entries)
    extra = built.cache or {}
    if not built.ok:
        return replace(built, cache={**extra, "key": key, "cached": False, "stored": False,
                                     "note": "build failed: not cached"})
    meta = {"key": key, "built_for": sha, "seconds": round(built.seconds, 3), "at": time.time()}
    refused = buildcache.store(root, key, slot.worktree, BUILD_DIR, meta, owner=_uid(slot),
                               refuse=lambda copy: _uncacheable(copy, slot.worktree, entries, declared))
    buildcache.prune(root, settings.build_cache_keep, protect=key)
    if refused is None:
        note = f"built in {built.seconds:.1f} s, cached as key {key[:12]}"
    else:
        note = f"built in {built.seconds:.1f} s, not cached: {refused}"
    return replace(built, cache={**extra, "key": key, "cached": False, "stored": refused is None, "note": note})


@dataclass(frozen=True)
class BuildPlan:
    """One revision's build command in a slot: run plainly, or incrementally (buildtree.wanted)."""

    command: str | None
    slot: Slot
    env: dict[str, str]
    device: str
    should_stop: Callable[[], bool] | None
    network: bool

    def _once(self, lease: buildtree.Lease | None = None) -> BuildResult:
        return run_build(self.command, self.slot, self.env, get_settings().build_timeout_s, self.should_stop,
                         self.network, lease)

    def run(self, mirror: Mirror, sha: str, entries: Sequence | None = None) -> BuildResult:
        """Build; where the command names the build tree, in the slot's tree with the compiler
        cache, retried without the cache when ccache failed and once from an empty tree when the
        build failed on a reused one. The result's `cache["incremental"]` says what happened."""
        if not buildtree.wanted(self.command):
            return self._once()
        if entries is None:
            try:
                entries = mirror.tree_entries(sha)
            except GitError:
                entries = None
        settings = get_settings()
        toolchain = build_toolchain(self.slot.env(self.env), self.device)
        lease = buildtree.take(settings, self.slot, mirror.path.name, toolchain, list(entries or ()))
        reused, spent, retried, ok = lease.reused, 0.0, [], False
        try:
            built = self._once(lease)
            if _failed(built) and lease.ccache is not None and buildtree.CCACHE_ERROR in built.log_tail:
                spent += built.seconds
                lease.drop_cache("ccache could not use its cache (its error is in the build log)")
                built = self._once(lease)
            if _failed(built) and lease.reused:
                spent += built.seconds
                retried.append("failed on the reused build tree: retried once from an empty one")
                lease.reset()
                built = self._once(lease)
            stats, ok = lease.stats(), built.ok
        finally:
            buildtree.give_back(lease, ok, entries)
        built = replace(built, seconds=built.seconds + spent)
        info: dict[str, Any] = {"tree_reused": reused, "warnings": lease.warnings + retried}
        if built.ok:
            info.update(buildtree.record(lease.store, built.seconds, lease.reused, stats))
        note = f"incremental build: {_incremental_words(info)}"
        return replace(built, log_tail=f"{note}\n{built.log_tail}",
                       cache={"cached": False, "stored": False, "note": note, "incremental": info})


def _failed(built: BuildResult) -> bool:
    """A build that failed by itself (not stopped or timed out): worth another try."""
    return not built.ok and built.stopped is None


def _incremental_words(info: dict[str, Any]) -> str:
    """`tree reused, ccache 12 hits / 3 misses, ~40.0 s saved` (and the warnings)."""
    words = ["tree reused" if info.get("tree_reused") else "empty tree"]
    if "hits" in info:
        words.append(f"ccache {info['hits']} hits / {info['misses']} misses")
    if "saved_s" in info:
        words.append(f"~{info['saved_s']:.1f} s saved")
    return ", ".join(words + list(info.get("warnings") or ()))


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
