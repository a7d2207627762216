"""The worker's side of cheap cold trials: the revision's cache directories (JIT cache and
accuracy references, shared by that revision's trials on this toolchain in one sandbox slot
only), pruned to the most recently used, and the input seed of a revision.

Each slot has its own tree, HOME/trial-cache/<host>/slot-N/<toolchain>/<sha>/{jit,reference}
(mode 0700, the slot's uid; <toolchain> names the repository too: toolchain_key): what a trial
writes there (compiled kernels, reference outputs) is read only by later trials of the same
slot, repository and revision: its namespace mounts only its slot's tree, and a trial's view of
it holds its own revision's directories only (kernels/harness/contain/trialview.py).

Repository code writes in that tree, so the worker (root) creates, marks and prunes its
directories only through kernels/harness/safefs.py, from the fd of the slot's tree (whose own
path only root can change): a symlink or a file where a toolchain or revision directory belongs
is removed as a link or a file, never followed (docs/containment.md)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from perfbisect.kernels.harness import safefs
from perfbisect.kernels.harness.caches import RevisionCaches, revision_dir, toolchain_fingerprint
from perfbisect.service.settings import Settings


def cache_root(settings: Settings) -> Path:
    return settings.home.resolve() / "trial-cache"


def slot_cache_root(settings: Settings, slot_path: Path) -> Path:
    """The cache tree of the slot at `slot_path` (.../sandbox/<host>/slot-N)."""
    return cache_root(settings) / slot_path.parent.name / slot_path.name


def caches_for(settings: Settings, sha: str, env: dict[str, str], root: Path, repository: str = "") -> RevisionCaches:
    """The caches of `sha` in one slot's tree `root` under the toolchain this worker runs (and
    the repository's env) and of `repository` alone, after dropping all but that slot's
    `trial_cache_keep` most recently used revisions."""
    toolchain, revision = toolchain_key(env, repository), revision_dir(sha)
    anchor = safefs.open_anchor(root)
    try:
        for relative in (toolchain, f"{toolchain}/{revision}", f"{toolchain}/{revision}/jit",
                         f"{toolchain}/{revision}/reference"):
            _directory(anchor, relative)
        base = safefs.open_beneath(anchor, f"{toolchain}/{revision}")
        try:
            os.utime(base)  # last use, for prune()
        finally:
            os.close(base)
        prune(anchor, settings.trial_cache_keep, protect=(toolchain, revision))
    finally:
        os.close(anchor)
    return RevisionCaches(revision, toolchain, root / toolchain / revision / "jit", root / toolchain / revision / "reference")


def toolchain_key(env: dict[str, str], repository: str) -> str:
    """The directory of a toolchain's revisions, of one repository: the same commit in two
    repositories (a fork) is built by each one's own build command, so neither may load what
    the other's trials compiled or computed as references."""
    toolchain = toolchain_fingerprint(env)
    return hashlib.sha256(f"{toolchain}\0{repository}".encode()).hexdigest()[:16] if repository else toolchain


def _directory(anchor: int, relative: str) -> None:
    """Make the directory `relative` under `anchor` (its parent exists), replacing a symlink or
    file of that name."""
    parent, _, name = relative.rpartition("/")
    fd = safefs.open_beneath(anchor, parent)
    try:
        try:
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                return
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        os.mkdir(name, 0o755, dir_fd=fd)
    finally:
        os.close(fd)


def prune(anchor: int, keep: int, protect: tuple[str, str]) -> list[str]:
    """Remove all but the `keep` most recently used revision caches under the slot's tree
    `anchor` (every toolchain together), never `protect` (toolchain, revision); what is not a
    directory at either level is removed as what it is. Returns the removed "toolchain/sha"."""
    entries = []
    for toolchain in _directories(anchor):
        fd = safefs.open_beneath(anchor, toolchain)
        try:
            entries += [(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime, toolchain, name)
                        for name in _directories(fd)]
        finally:
            os.close(fd)
    entries.sort(reverse=True)
    removed = []
    for _, toolchain, revision in entries[keep:]:
        if (toolchain, revision) == protect:
            continue
        try:
            _remove(anchor, toolchain, revision)
        except OSError:  # e.g. a mount point: never entered; the trial goes on
            continue
        removed.append(f"{toolchain}/{revision}")
    for toolchain in _directories(anchor):
        try:
            os.rmdir(toolchain, dir_fd=anchor)
        except OSError:  # not empty
            pass
    return removed


def _directories(fd: int) -> list[str]:
    """The subdirectories of `fd`; anything else there (a symlink, a file, a FIFO) is unlinked."""
    found = []
    for name in os.listdir(fd):
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            found.append(name)
        else:
            os.unlink(name, dir_fd=fd)
    return found


def _remove(anchor: int, toolchain: str, revision: str) -> None:
    fd = safefs.open_beneath(anchor, toolchain)
    try:
        safefs.remove_tree(fd, revision)
    finally:
        os.close(fd)


def revision_seed(sha: str) -> int:
    """Inputs drawn from a seed of the revision: the trials of one revision check accuracy on
    the same inputs, so its reference is computed once; another revision draws other inputs."""
    return int(sha[:8], 16)
