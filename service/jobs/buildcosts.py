"""Each revision's expected build cost for a job's round (issue 45): what the planner's
cost-aware probes read (`BisectConfig.build_costs`).

Only for a repository that builds incrementally (its command names `{build_tree}`,
workers/buildtree.py) once one of the job's builds was timed: a full build's seconds are the
slowest incremental build the job has seen, a translation unit's that over the number of compiled
sources at the bad end; a commit's touch cost comes from the paths it changed (`touch_costs`), and
a revision's cost from the revisions already built (`expected_costs`). Anything missing (no
mirror on this host, git failing) gives no costs: the planner then probes midpoints as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from sqlalchemy.orm import Session

from perfbisect.gitrepo import GitError, Mirror
from perfbisect.service.bisect.buildcost import expected_costs, touch_costs
from perfbisect.service.models import Job, Repository, Trial
from perfbisect.service.settings import get_settings

log = logging.getLogger(__name__)

BUILD_TREE_NAMES = ("{build_tree}", "PERFBISECT_BUILD_TREE")
COMPILED = (".c", ".cc", ".cpp", ".cxx", ".cu", ".hip")


def incremental(command: str | None) -> bool:
    """Whether a repository's build command opted in to incremental builds (names the build tree)."""
    return bool(command) and any(name in command for name in BUILD_TREE_NAMES)


def job_build_costs(session: Session, job: Job, trials: Sequence[Trial]) -> tuple[float, ...]:
    """The expected build seconds of each of the job's revisions now; () when unknown."""
    repo = session.get(Repository, job.repository_id)
    if repo is None or not incremental(repo.build_command):
        return ()
    timed = [t.build_s for t in trials if t.build_s and isinstance(t.build_cache, dict) and "incremental" in t.build_cache]
    if not timed:
        return ()
    settings = get_settings()
    shas = tuple(job.revision_shas)
    try:
        changed, units = _changes(str(settings.mirrors_dir), repo.name, repo.url, shas)
    except (GitError, OSError, ValueError) as exc:
        log.info("job %s: no build costs: %s", job.id, exc)
        return ()
    full = max(timed)
    built = {i for i, sha in enumerate(shas) if any(t.revision.sha == sha and t.build_s for t in trials)}
    return expected_costs(touch_costs(changed, full / max(1, units), full), full, built)


@lru_cache(maxsize=64)
def _changes(mirrors: str, name: str, url: str, shas: tuple[str, ...]) -> tuple[tuple[tuple[str, ...], ...], int]:
    """Per revision the paths its commit changed against its first parent (the first revision:
    none), and the number of compiled sources at the last revision. Raises GitError."""
    mirror = Mirror(Path(mirrors), name, url)
    paths = mirror.changed_paths(shas[0], shas[-1])
    units = sum(1 for e in mirror.tree_entries(shas[-1]) if e.path.endswith(COMPILED))
    return tuple(tuple(paths.get(sha, ())) for sha in shas), units
