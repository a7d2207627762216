"""The worker's side of cheap cold trials: the revision's cache directories (JIT cache and
accuracy references, shared by that revision's trials on this toolchain in one sandbox slot
only), pruned to the most recently used, and the input seed of a revision.

Each slot has its own tree, HOME/trial-cache/<host>/slot-N/<toolchain>/<sha>/{jit,reference}
(mode 0700, the slot's uid): what a trial writes there (compiled kernels, reference outputs) is
read only by later trials of the same slot, never by another slot's trial, whose code another
commit may be. Its namespace mounts only its own tree (workers/sandbox.py)."""

from __future__ import annotations

from pathlib import Path

from perfbisect.kernels.harness.caches import RevisionCaches, prune, revision_caches
from perfbisect.service.settings import Settings


def cache_root(settings: Settings) -> Path:
    return settings.home.resolve() / "trial-cache"


def slot_cache_root(settings: Settings, slot_path: Path) -> Path:
    """The cache tree of the slot at `slot_path` (.../sandbox/<host>/slot-N)."""
    return cache_root(settings) / slot_path.parent.name / slot_path.name


def caches_for(settings: Settings, sha: str, env: dict[str, str], root: Path) -> RevisionCaches:
    """The caches of `sha` in one slot's tree `root` under the toolchain this worker runs (and
    the repository's env), after dropping all but that slot's `trial_cache_keep` most recently
    used revisions."""
    caches = revision_caches(root, sha, env)
    prune(root, settings.trial_cache_keep, protect=caches.jit_dir.parent)
    return caches


def revision_seed(sha: str) -> int:
    """Inputs drawn from a seed of the revision: the trials of one revision check accuracy on
    the same inputs, so its reference is computed once; another revision draws other inputs."""
    return int(sha[:8], 16)
