"""The build cache: a revision whose declared build inputs, build command, env and toolchain
equal those of a revision already built on this worker gets that build's output, copied into its
build directory, instead of running the command again.

    inputs = declared_files(mirror.tree_entries(sha), patterns)   # pure
    key = build_key(command, toolchain, patterns, inputs)          # pure
    meta = lookup(root, key); restore(root, key, worktree, BUILD_DIR, give=(uid, gid))  # a hit
    store(root, key, worktree, BUILD_DIR, meta, owner=uid, refuse=check)   # after a successful build

THE RULE that makes a hit correct: what the command leaves in `{build_dir}` must depend only on
the declared inputs (and the command, env and toolchain, which are in the key). A build that also
copies a file that is not declared (pip copies every Python source of the package) would be
served stale after that file changes. Two checks refuse to store such a build (the trial says
why): a file of the output whose content equals an undeclared file of the revision's tree, and a
`.pth`/`.egg-link` file naming the worktree (an output that imports from wherever it was built).
Only `{build_dir}` is kept, and it is restored into another slot's worktree, so the output must
not need files the build wrote elsewhere, nor absolute paths of the worktree.

Layout: ROOT/<key>/{build/, meta.json}. An entry is complete or absent: it is written under
ROOT/.tmp-<key>-<random>/ and renamed into place (rename is atomic; a worker that built the same
key meanwhile finds the name taken and drops its copy), so a copy cut short leaves only a temp
directory, which is never served and is removed once it is old. Entries are copied, never
hard-linked: a trial runs as the sandbox user in its build directory and must not be able to
change the cached files.

The cache stores no privilege and follows nothing: a build runs as the sandbox user, but the
worker (root) makes the copies, and a copy that kept a setuid bit would be a root-owned setuid
program, one that followed a symlink would copy whatever root can read. Every copy, into the cache
and out of it, goes through kernels/harness/safefs.py: from the worktree's fd, never through a
symlink (a symlinked `{build_dir}` is not cached), only the builder's own regular files (a
hardlink to another user's file, a FIFO, socket or device is skipped and listed in meta.json's
"skipped"), symlinks as symlinks, within MAX_BYTES (apparent size: a sparse file counts in full),
MAX_FILES and MAX_DEPTH; with the permission bits only (no setuid, setgid or sticky bit, no group
or other write), owned by the worker in the cache and by the slot's user once restored. The
checks above read the worker's own copy, never the build directory. The cache's root is the
worker's alone (0700), so a trial can neither read nor change an entry, nor run one.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from perfbisect.gitrepo import TreeEntry
from perfbisect.kernels.harness import safefs
from perfbisect.kernels.harness.caches import last_used
from perfbisect.kernels.harness.safefs import Limits, plain_mode

WHOLE_TREE = "."
META = "meta.json"
TMP_PREFIX = ".tmp-"
STALE_TMP_S = 6 * 3600  # a temp directory this old belongs to a copy that was cut short
PATH_FILES = (".pth", ".egg-link")  # outputs whose lines go on sys.path
# What an output may hold to be cached (a CUDA extension's build is hundreds of MiB, a
# site-packages tree a dozen directories deep); past one the build is simply not cached.
MAX_BYTES = 16 * 2**30
MAX_FILES = 200_000
MAX_DEPTH = 64
MAX_LISTED = 50  # skipped entries named in an entry's metadata
# Restoring copies the worker's own entry, which store() bounded already.
RESTORE_LIMITS = Limits(2**62, 2**62, MAX_DEPTH + 1)


def matches(path: str, pattern: str) -> bool:
    """Whether the tree path `path` is declared by `pattern`: the whole tree ("."), the path
    itself, a file under a declared directory, or a glob matched against the path or one of its
    parent directories (`*` also crosses `/`, as in git pathspecs)."""
    pattern = pattern.rstrip("/")
    if pattern == WHOLE_TREE:
        return True
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes)


def declared_files(entries: Iterable[TreeEntry], patterns: Sequence[str]) -> list[TreeEntry]:
    """The entries of a revision's tree that the patterns declare, in path order."""
    return sorted((e for e in entries if any(matches(e.path, p) for p in patterns)), key=lambda e: e.path)


def build_key(command: str, toolchain: dict[str, Any], patterns: Sequence[str], inputs: Sequence[TreeEntry],
              dependencies: Sequence[str] = ()) -> str:
    """sha256 over what a build's output may depend on: the command, the toolchain (interpreter,
    torch, triton, driver, device, the build's environment), the declarations, the object id
    of every declared file and the dependencies placed in the worktree ("name=commit": their
    files are not the revision's tree, their commit fixes them)."""
    basis = {"command": command, "toolchain": toolchain, "patterns": sorted(patterns),
             "inputs": [[e.path, e.oid] for e in inputs]}
    if dependencies:  # absent otherwise, so the keys of repositories without any stay as they were
        basis["dependencies"] = sorted(dependencies)
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()


def blob_id(data: bytes) -> str:
    """The git object id of a file's content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def undeclared_copies(build_dir: Path, entries: Sequence[TreeEntry], declared: Sequence[TreeEntry]) -> list[str]:
    """Undeclared (non-empty) files of the tree whose exact content is also a file of the build
    output: the build copied them, so a hit would serve them stale. Reads only the output files
    whose size is that of an undeclared file."""
    declared_paths = {e.path for e in declared}
    undeclared: dict[str, list[str]] = {}
    for entry in entries:
        if entry.path not in declared_paths and entry.size:
            undeclared.setdefault(entry.oid, []).append(entry.path)
    sizes = {e.size for e in entries if e.oid in undeclared}
    copied: set[str] = set()
    for path in _files(build_dir):
        if path.stat().st_size in sizes:
            copied.update(undeclared.get(blob_id(path.read_bytes()), []))
    return sorted(copied)


def names_worktree(build_dir: Path, worktree: Path) -> list[str]:
    """The `.pth`/`.egg-link` files of the output that name the worktree (paths relative to it)."""
    marker = str(worktree).encode()
    return sorted(str(p.relative_to(build_dir)) for p in _files(build_dir)
                  if p.name.endswith(PATH_FILES) and marker in p.read_bytes())


def lookup(root: Path, key: str) -> dict[str, Any] | None:
    """The metadata of the complete entry `key` (marked used), or None."""
    entry = root / key
    try:
        meta = json.loads((entry / META).read_text())
        os.utime(entry)  # last use, for prune()
    except (OSError, ValueError):
        return None
    return meta


def restore(root: Path, key: str, worktree: Path, name: str, give: tuple[int, int] | None = None) -> None:
    """Copy entry `key`'s output to `name` under `worktree` (replacing whatever is there, a
    symlink included, never following it), owned by `give` (uid, gid) when given. Raises OSError
    when the entry vanished under the copy (pruned meanwhile; the partial copy is removed): the
    caller then builds."""
    anchor = safefs.open_anchor(worktree)
    try:
        safefs.remove_tree(anchor, name)
        try:
            _copy_entry(root / key / "build", anchor, name, give)
        except OSError:
            safefs.remove_tree(anchor, name)
            raise
    finally:
        os.close(anchor)


def _copy_entry(entry: Path, anchor: int, name: str, give: tuple[int, int] | None) -> None:
    source = safefs.open_anchor(entry)
    try:
        os.mkdir(name, 0o700, dir_fd=anchor)
        target = safefs.open_beneath(anchor, name)
        try:
            safefs.copy_tree(source, target, RESTORE_LIMITS, owner=os.geteuid(), give=give)
            if give:
                os.fchown(target, *give)
            os.fchmod(target, plain_mode(os.fstat(source).st_mode) | stat.S_IRWXU)
        finally:
            os.close(target)
    finally:
        os.close(source)


def store(root: Path, key: str, worktree: Path, name: str, meta: dict[str, Any], *, owner: int | None,
          refuse: Callable[[Path], str | None] | None = None) -> str | None:
    """Keep a copy of the build output `name` under `worktree` (its files of uid `owner`, by
    safefs's rule) as entry `key`; None when stored, else why not: the output is a symlink or
    past a limit, `refuse(copy)` objects to it, the copy failed, or another worker stored the key
    first (the entry is then absent, never partial). A damaged entry of that key (no metadata:
    never written so, since the rename is the last step) is replaced."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)  # the worker's alone: no trial reads, changes or runs an entry
    tmp = root / f"{TMP_PREFIX}{key}-{uuid.uuid4().hex}"
    try:
        tmp.mkdir(0o700)
        (tmp / "build").mkdir(0o700)
        skipped = _copy_output(worktree, name, tmp / "build", owner)
        why_not = refuse(tmp / "build") if refuse else None
        if why_not:
            return why_not
        (tmp / META).write_text(json.dumps({**meta, "skipped": skipped[:MAX_LISTED]}))
        if (root / key).exists() and not (root / key / META).exists():
            _discard(root, root / key)
        try:
            os.rename(tmp, root / key)
        except OSError:
            return "another worker cached this key first"
        return None
    except (safefs.Unsafe, safefs.LimitExceeded) as exc:
        return f"the output {exc.strerror}"
    except OSError as exc:  # the disk is full
        return f"the copy failed: {exc}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_output(worktree: Path, name: str, copy: Path, owner: int | None) -> list[str]:
    """Copy the output (`name` under `worktree`) into `copy`; an absent output is an empty one.
    Returns what was skipped. Raises Unsafe, LimitExceeded or OSError."""
    anchor = safefs.open_anchor(worktree)
    try:
        try:
            source = safefs.open_beneath(anchor, name)
        except FileNotFoundError:  # the command installed nothing there: an empty output is cached too
            return []
        except NotADirectoryError as exc:
            raise safefs.Unsafe(exc.errno, f"{name} is not a directory") from exc
    finally:
        os.close(anchor)
    target = safefs.open_anchor(copy)
    try:
        copied = safefs.copy_tree(source, target, Limits(MAX_BYTES, MAX_FILES, MAX_DEPTH), owner=owner)
        os.fchmod(target, plain_mode(os.fstat(source).st_mode) | stat.S_IRWXU)
        return copied.skipped
    finally:
        os.close(source)
        os.close(target)


def prune(root: Path, keep: int, protect: str | None = None) -> list[str]:
    """Remove all but the `keep` most recently used entries (never `protect`) and the temp
    directories of copies cut short long ago. An entry is renamed away before it is deleted, so
    a lookup never sees it half removed. Returns the removed keys."""
    if not root.is_dir():
        return []
    entries, now = [], time.time()
    for path in root.iterdir():
        if path.name.startswith(TMP_PREFIX):
            if now - last_used(path) > STALE_TMP_S:
                shutil.rmtree(path, ignore_errors=True)
        elif path.is_dir():
            entries.append(path)
    entries.sort(key=last_used, reverse=True)
    removed = []
    for path in entries[keep:]:
        if path.name != protect and _discard(root, path):
            removed.append(path.name)
    return removed


def _discard(root: Path, path: Path) -> bool:
    """Rename `path` out of the way, then delete it; False when it was already gone."""
    doomed = root / f"{TMP_PREFIX}discarded-{uuid.uuid4().hex}"
    try:
        os.rename(path, doomed)
    except OSError:  # removed by a concurrent worker
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def _files(top: Path) -> Iterable[Path]:
    for base, _dirs, names in os.walk(top):
        for name in names:
            path = Path(base, name)
            if path.is_file() and not path.is_symlink():
                yield path
