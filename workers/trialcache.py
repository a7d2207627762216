"""The worker's side of cheap cold trials: the revision's cache directories (JIT cache and
accuracy references, shared by that revision's trials on this toolchain only), pruned to the
most recently used, and the input seed of a revision."""

from __future__ import annotations

from pathlib import Path

from perfbisect.kernels.harness.caches import RevisionCaches, prune, revision_caches
from perfbisect.service.settings import Settings


def cache_root(settings: Settings) -> Path:
    return settings.home.resolve() / "trial-cache"


def caches_for(settings: Settings, sha: str, env: dict[str, str]) -> RevisionCaches:
    """The caches of `sha` under the toolchain this worker runs (and the repository's env),
    after dropping all but the `trial_cache_keep` most recently used revisions."""
    caches = revision_caches(cache_root(settings), sha, env)
    prune(cache_root(settings), settings.trial_cache_keep, protect=caches.jit_dir.parent)
    return caches


def revision_seed(sha: str) -> int:
    """Inputs drawn from a seed of the revision: the trials of one revision check accuracy on
    the same inputs, so its reference is computed once; another revision draws other inputs."""
    return int(sha[:8], 16)
