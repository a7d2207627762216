"""A toolchain bisect's revisions (issue 44): the versions of a package that a wheelhouse holds,
as the job's revisions ("tinyop==2.0"), at one commit of the repository. The rules are pure
(service/toolchains/rules.py); this module lists the wheelhouse (a local directory read, fine in
a request) and resolves the commit from the mirror. Raises BadRequest (422) with the reason;
writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from perfbisect.gitrepo import CommitInfo, GitError, Mirror
from perfbisect.service.toolchains import rules as rules
from perfbisect.service.errors import BadRequest
from perfbisect.service.job_spec import Toolchain


def from_wheelhouse(ask: rules.Ask, wheelhouse: str) -> Toolchain:
    """The versions `ask` names among the wheels of `wheelhouse`, in bisect order. Raises
    BadRequest: no such directory, a listed version without its wheel, fewer than two versions."""
    try:
        names = os.listdir(wheelhouse)
    except OSError as exc:
        raise BadRequest(f"wheelhouse {wheelhouse}: {exc.strerror or exc}") from None
    available = rules.wheel_versions(ask.package, names)
    try:
        chosen = rules.select(ask, list(available), f"the wheelhouse {wheelhouse}")
    except rules.ToolchainError as exc:
        raise BadRequest(str(exc)) from None
    return Toolchain(package=ask.package, versions=chosen, wheelhouse=str(Path(wheelhouse)))


def revisions(toolchain: Toolchain) -> list[CommitInfo]:
    """The job's revisions: one per version, labelled "package==version", off any branch
    (position None: never a point of the repository's history)."""
    return [CommitInfo(rules.label(toolchain.package, v), None, "", None, f"{toolchain.package} {v}", None)
            for v in toolchain.versions]


def commit_of(mirror: Mirror, good: str, bad: str) -> str:
    """The one commit a toolchain bisect measures: `good`, and `bad` when given must be the
    same commit. Raises GitError."""
    good_sha, bad_sha = mirror.resolve(good), mirror.resolve(bad)
    if good_sha != bad_sha:
        raise GitError(f"a toolchain bisect measures one commit: good ({good}, {good_sha[:12]}) and bad ({bad}, "
                       f"{bad_sha[:12]}) differ; give the commit as good (and bad, or leave bad out in the CLI)")
    return good_sha
