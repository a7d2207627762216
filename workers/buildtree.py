"""Incremental builds: a build tree kept per worker slot, repository and toolchain, and a compiler
cache (ccache) per repository and toolchain, for a repository whose build command names
`{build_tree}` (or $PERFBISECT_BUILD_TREE), e.g.

    {python} setup.py build_ext --build-temp {build_tree} --build-lib {build_dir}
    cmake -S . -B {build_tree} -G Ninja && cmake --build {build_tree} && cmake --install {build_tree} --prefix {build_dir}

The tree holds the intermediate objects; what a trial imports still goes to `{build_dir}`. The
next revision built in the slot finds the tree as the last one left it: files of the checkout that
did not change since the tree's last build get an old mtime, so make and Ninja rebuild only what
changed; the compiler cache (C/C++, and CUDA/HIP through CMake's compiler launchers) serves every
translation unit compiled before with the same input, in any slot.

Containment (docs/containment.md): between builds the trees and caches lie under
HOME/build-trees/ (0700, the worker's), out of every trial's reach. For a build they are moved (a
rename) into the slot and handed to the slot's user, who writes them; after the build, before any
trial runs, they are moved back and every setuid, setgid or sticky bit and group or other write
bit in them is cleared. One repository's cache never serves another's: the store is keyed by
repository and toolchain.

Faults:
- a worker killed during a build leaves the tree in its slot, which is wiped; the store has no
  tree then (its state file goes when the tree is taken), so the next build starts clean;
- a failed build's tree is discarded, never stored (it would poison the next revision's build);
- a build that fails on a reused tree is retried once from an empty one (workers/build.py);
- a cache that another slot is using, on a disk with too little free space, or that ccache
  cannot write (its "ccache: error" in the build log) gives a plain build with a warning.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from perfbisect.gitrepo import TreeEntry
from perfbisect.kernels.harness import safefs
from perfbisect.service.jobs.buildcosts import incremental
from perfbisect.service.settings import Settings
from perfbisect.workers.sandbox import Slot

log = logging.getLogger(__name__)

TREE = "build-tree"  # the tree's name inside a slot while it builds
CCACHE = "ccache"
STATE = "state.json"
STATS_FILE = "ccache-stats"  # in the slot's TMPDIR: what ccache did during the build
CCACHE_WRAPPERS = Path("/usr/lib/ccache")  # Debian's gcc/g++/cc/c++ links to ccache
OLD_MTIME = 946684800  # 2000-01-01: older than any object the tree holds
CCACHE_ERROR = "ccache: error"
KEEP_BITS = ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH)


def wanted(command: str | None) -> bool:
    """Whether the repository opted in to incremental builds: its command names the build tree."""
    return incremental(command)


def store_root(settings: Settings) -> Path:
    return settings.home.resolve() / "build-trees"


def store_name(repository: str, toolchain: dict[str, Any]) -> str:
    """The store of one repository and toolchain: `<repository>-<16 hex digits>`."""
    digest = hashlib.sha256(json.dumps(toolchain, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', repository)[:80]}-{digest}"


@dataclass
class Lease:
    """A slot's hold on its tree (and, when it got it, the repository's compiler cache) for one build."""

    slot: Slot
    store: Path  # HOME/build-trees/<repository>-<toolchain>
    reused: bool  # the tree holds an earlier build's objects
    manifest: dict[str, str]  # path -> blob id of the tree's last build
    cache_lock: IO[str] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def tree(self) -> Path:
        return self.slot.path / TREE

    @property
    def tree_store(self) -> Path:
        return self.store / f"{socket.gethostname()}-{self.slot.path.name}"

    @property
    def ccache(self) -> Path | None:
        return self.slot.path / CCACHE if self.cache_lock is not None else None

    def env(self, worktree: Path, max_mb: int) -> dict[str, str]:
        """The build's environment for the tree and the compiler cache (none when it has none)."""
        env = {"PERFBISECT_BUILD_TREE": str(self.tree)}
        if self.ccache is None:
            return env
        return {**env, "CCACHE_DIR": str(self.ccache), "CCACHE_BASEDIR": str(worktree), "CCACHE_NOHASHDIR": "true",
                "CCACHE_MAXSIZE": f"{max_mb}M", "CCACHE_UMASK": "077",
                "PATH": f"{CCACHE_WRAPPERS}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                **{f"CMAKE_{lang}_COMPILER_LAUNCHER": "ccache" for lang in ("C", "CXX", "CUDA", "HIP")}}

    def wrap(self, command: str) -> str:
        """The command, with ccache's counters zeroed before and written to the slot's TMPDIR after."""
        if self.ccache is None:
            return command
        stats = self.slot.tmp / STATS_FILE
        return (f"ccache -z >/dev/null 2>&1; ( {command}\n); rc=$?; "
                f"ccache --print-stats > '{stats}' 2>/dev/null; exit $rc")

    def reset(self) -> None:
        """Empty the tree (a retry from clean)."""
        _remove(self.slot.path, TREE)
        self.tree.mkdir(mode=0o755)
        self.slot.give(self.tree)
        self.reused, self.manifest = False, {}

    def drop_cache(self, why: str) -> None:
        """Build without the compiler cache from now on; the cache, which ccache could not use,
        is discarded (the next build starts an empty one)."""
        self.warnings.append(f"compiler cache off: {why}")
        log.warning("build in %s without ccache: %s", self.slot.path, why)
        if self.cache_lock is not None:
            _remove(self.slot.path, CCACHE)
            _release(self.cache_lock)
            self.cache_lock = None

    def stats(self) -> dict[str, int] | None:
        """ccache's hits and misses during this build (None without a cache or its counters)."""
        if self.ccache is None:
            return None
        anchor = safefs.open_anchor(self.slot.path)
        try:
            owner = self.slot.user.uid if self.slot.user else None
            text = safefs.read_beneath(anchor, f"{self.slot.tmp.name}/{STATS_FILE}", limit=1 << 16,
                                       owner=owner).decode(errors="replace")
        except OSError:
            return None
        finally:
            os.close(anchor)
        counts = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)

        def count(name: str) -> int:
            value = counts.get(name, "0").strip()
            return int(value) if value.isdigit() else 0

        return {"hits": count("direct_cache_hit") + count("preprocessed_cache_hit"), "misses": count("cache_miss")}


def take(settings: Settings, slot: Slot, repository: str, toolchain: dict[str, Any],
         entries: list[TreeEntry] | None) -> Lease:
    """Move the slot's tree for `repository` and `toolchain` (an empty one where none is stored,
    or the stored one is incomplete) and the repository's compiler cache into the slot, handed to
    its user; the checked-out files unchanged since the tree's last build get an old mtime."""
    store = store_root(settings) / store_name(repository, toolchain)
    store.mkdir(parents=True, exist_ok=True)
    for directory in (store_root(settings), store):
        directory.chmod(0o700)  # the worker's alone: no trial reaches a tree or a cache
    lease = Lease(slot, store, reused=False, manifest={})
    manifest = _read_state(lease.tree_store)
    _remove(slot.path, TREE)
    if manifest is not None and _move(lease.tree_store / "tree", lease.tree):
        lease.reused, lease.manifest = True, manifest
    else:
        _discard_stored(lease)  # half-written or never stored
        lease.tree.mkdir(mode=0o755)
    slot.give(lease.tree)
    if lease.reused and entries is not None:
        _age_unchanged(slot.worktree, entries, manifest or {})
    if settings.build_ccache:
        _take_cache(lease, settings)
    return lease


def give_back(lease: Lease, ok: bool, entries: list[TreeEntry] | None) -> None:
    """After the build: a successful build's tree (cleared of special and shared-write bits) goes
    back to the store with the manifest of the revision it built; a failed build's is discarded.
    The compiler cache goes back either way (ccache stores only finished compilations)."""
    if lease.cache_lock is not None:
        _put_back(lease.slot.path / CCACHE, lease.store / CCACHE)
        _release(lease.cache_lock)
        lease.cache_lock = None
    _discard_stored(lease)
    if not ok or not lease.tree.is_dir() or lease.tree.is_symlink():
        _remove(lease.slot.path, TREE)
        return
    lease.tree_store.mkdir(mode=0o700)
    _plain_tree(lease.tree)
    if not _move(lease.tree, lease.tree_store / "tree"):
        _remove(lease.slot.path, TREE)
        return
    manifest = {e.path: e.oid for e in entries or ()}
    (lease.tree_store / STATE).write_text(json.dumps({"files": manifest}))  # last: the tree is complete


def _take_cache(lease: Lease, settings: Settings) -> None:
    """The repository's compiler cache into the slot, unless ccache is missing, another slot holds
    it, or the disk is nearly full (then a warning: the build runs without it)."""
    if not (CCACHE_WRAPPERS / "gcc").exists() or shutil.which("ccache") is None:
        lease.warnings.append("compiler cache off: ccache is not installed (scripts/system_packages.sh)")
        return
    free_mb = shutil.disk_usage(lease.store).free >> 20
    if free_mb < settings.build_ccache_min_free_mb:
        lease.warnings.append(f"compiler cache off: {free_mb} MiB free on its disk "
                              f"(PERFBISECT_BUILD_CCACHE_MIN_FREE_MB={settings.build_ccache_min_free_mb})")
        return
    handle = open(lease.store / "ccache.lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        lease.warnings.append("compiler cache off: another slot is building this repository with it")
        return
    cache = lease.store / CCACHE
    if not cache.is_dir() or cache.is_symlink():
        _remove(lease.store, CCACHE)
        cache.mkdir(mode=0o700)
    _remove(lease.slot.path, CCACHE)
    if not _move(cache, lease.slot.path / CCACHE):
        _release(handle)
        lease.warnings.append("compiler cache off: it cannot be moved into the slot (another file system?)")
        return
    lease.cache_lock = handle
    lease.slot.give(lease.slot.path / CCACHE)


def _read_state(tree_store: Path) -> dict[str, str] | None:
    """The manifest of a complete stored tree; None where there is none or it is incomplete."""
    try:
        files = json.loads((tree_store / STATE).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(files, dict) or not (tree_store / "tree").is_dir():
        return None
    (tree_store / STATE).unlink()  # taken: a worker killed from here on leaves no stored tree
    return files


def _age_unchanged(worktree: Path, entries: list[TreeEntry], manifest: dict[str, str]) -> None:
    """Give the checked-out files whose content the tree's last build saw an old mtime (reached
    beneath the worktree, never through a symlink), so make and Ninja rebuild only what changed."""
    anchor = safefs.open_anchor(worktree)
    try:
        for entry in entries:
            if manifest.get(entry.path) != entry.oid:
                continue
            try:
                fd = safefs.open_beneath(anchor, entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:  # a symlink, or not there
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.utime(fd, (OLD_MTIME, OLD_MTIME))
            finally:
                os.close(fd)
    finally:
        os.close(anchor)


def _plain_tree(top: Path) -> None:
    """Clear every setuid, setgid and sticky bit and group or other write bit under `top`
    (symlinks left alone, never followed; FIFOs, sockets and devices removed)."""
    for _base, dirs, files, dirfd in os.fwalk(top, follow_symlinks=False):
        for name in dirs + files:
            info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                continue
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                os.unlink(name, dir_fd=dirfd)
                continue
            if info.st_mode & ~KEEP_BITS:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
                try:
                    os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) & KEEP_BITS)
                finally:
                    os.close(fd)
    os.chmod(top, stat.S_IMODE(os.lstat(top).st_mode) & KEEP_BITS)


def _move(source: Path, target: Path) -> bool:
    """Rename `source` to `target` (False when it is not a directory or the rename fails)."""
    if not source.is_dir() or source.is_symlink():
        return False
    try:
        os.rename(source, target)
    except OSError as exc:
        log.warning("build tree: cannot move %s to %s: %s", source, target, exc)
        return False
    return True


def _put_back(source: Path, target: Path) -> None:
    """The cache, back in the store (cleared of special bits); dropped where it cannot be."""
    if source.is_dir() and not source.is_symlink():
        _plain_tree(source)
        if _move(source, target):
            return
    _remove(source.parent, source.name)


def _discard_stored(lease: Lease) -> None:
    """Remove the stored tree (the slot's user wrote it), never through a link inside it; a tree
    root cannot remove is left with a warning, as before."""
    try:
        _remove(lease.store, lease.tree_store.name)
    except OSError as exc:
        log.warning("build tree: cannot remove %s: %s", lease.tree_store, exc)


def _remove(parent: Path, name: str) -> None:
    """Remove `name` under `parent`, never through a symlink."""
    anchor = safefs.open_anchor(parent)
    try:
        safefs.remove_tree(anchor, name)
    except FileNotFoundError:
        pass
    finally:
        os.close(anchor)


def _release(handle: IO[str]) -> None:
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


def record(store: Path, seconds: float, reused: bool, stats: dict[str, int] | None) -> dict[str, Any]:
    """Add one successful build to the store's totals (stats.json) and return this build's
    figures: hits and misses, and the seconds saved against the last cold build (an empty tree
    and no cache hit) of the repository and toolchain. A build that hit nothing and compiled at
    least as many units as that cold build saved nothing, whatever its time: setuptools compiles
    every source again (msgspec's one unit, bench/RESULTS.md), and a build that only ran faster
    on a quieter machine was credited the difference."""
    path = store / "stats.json"
    try:
        totals = json.loads(path.read_text())
    except (OSError, ValueError):
        totals = {}
    hits, misses = (stats or {}).get("hits", 0), (stats or {}).get("misses", 0)
    cold = not reused and hits == 0
    if cold:
        totals["full_s"] = round(seconds, 3)
        totals["full_units"] = misses
    recompiled_all = stats is not None and hits == 0 and misses >= int(totals.get("full_units") or 0)
    saved = 0.0 if cold or recompiled_all else max(0.0, float(totals.get("full_s") or 0.0) - seconds)
    for name, value in (("builds", 1), ("hits", hits), ("misses", misses), ("seconds", seconds), ("saved_s", saved)):
        totals[name] = round(totals.get(name, 0) + value, 3)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(totals))
    os.replace(tmp, path)
    counted = {} if stats is None else {"hits": hits, "misses": misses}
    return {**counted, "saved_s": round(saved, 3)}


def totals(settings: Settings) -> list[tuple[str, dict[str, Any]]]:
    """Every store's totals (for `perfbisect doctor`): (store name, stats)."""
    root = store_root(settings)
    rows = []
    for path in sorted(root.glob("*/stats.json")) if root.is_dir() else []:
        try:
            rows.append((path.parent.name, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return rows


def doctor_lines(settings: Settings) -> list[str]:
    """What `perfbisect doctor` says of incremental builds: whether ccache is there, and each
    repository and toolchain's builds, cache hits and misses and build seconds saved."""
    found = shutil.which("ccache")
    head = (f"incremental builds: compiler cache ccache ({found})" if found and settings.build_ccache
            else "incremental builds: no compiler cache (ccache is not installed: scripts/system_packages.sh)"
            if settings.build_ccache else "incremental builds: compiler cache off (PERFBISECT_BUILD_CCACHE=0)")
    lines = [head]
    for store, t in totals(settings):
        lines.append(f"  {store}: {int(t.get('builds', 0))} builds, {float(t.get('seconds', 0)):.1f} s building, "
                     f"compiler cache {int(t.get('hits', 0))} hits / {int(t.get('misses', 0))} misses, "
                     f"~{float(t.get('saved_s', 0)):.1f} s of build saved")
    return lines
