"""Registering repositories and recording their revisions. Flushes, never commits."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.orm import Session

from perfbisect.gitrepo import CommitInfo, GitError, Mirror
from perfbisect.service.bounds import MAX_ID
from perfbisect.service.db import insert_or_skip
from perfbisect.service import outbound
from perfbisect.service.errors import BadRequest, Conflict, NotFound
from perfbisect.service.models import Repository, Revision
from perfbisect.service.repos import dependencies, repository
from perfbisect.service.repos.schemas import Dependency, RepositoryCreate, RepositoryUpdate
from perfbisect.service.repos.urls import checked_url, remote_host
from perfbisect.service.settings import get_settings


def mirror_of(repo: Repository) -> Mirror:
    settings = get_settings()
    return Mirror(settings.mirrors_dir, repo.name, repo.url, timeout_s=settings.fetch_timeout_s)


def create(session: Session, data: RepositoryCreate, *, verify: bool = True,
           local_roots: Sequence[Path] | None = None) -> Repository:
    """Register a repository (the caller checked that an admin asks); with `verify`, clone its
    mirror first so a bad URL is a 422 now, not a failed job later. A local path must lie under
    `local_roots` (default: the configured PERFBISECT_LOCAL_REPO_ROOTS), a remote host must not
    resolve to a non-public address unless allowed (service/outbound.py). Raises Conflict for a
    taken name, BadRequest for a refused or unusable URL."""
    if repository.get_by_name(session, data.name) is not None:
        raise Conflict(f"a repository named {data.name!r} is already registered")
    roots = get_settings().allowed_local_roots if local_roots is None else local_roots
    repo = Repository(**{**data.model_dump(mode="json", exclude={"dependencies"}), "url": checked_url(data.url, roots),
                         "dependencies": [d.model_dump(mode="json", exclude_none=True) for d in data.dependencies]})
    if (host := remote_host(repo.url)) is not None:
        outbound.check_host(host)  # not the service's own network (PERFBISECT_OUTBOUND_ALLOW)
    if verify:
        try:
            mirror_of(repo).ensure()
        except GitError as exc:
            raise BadRequest(str(exc)) from exc
        set_dependencies(session, repo, data.dependencies)
    elif data.dependencies:  # unverified (tests, the CLI's own paths): at least registered repositories
        for dep in data.dependencies:
            dependencies.registered(session, dep.repository)
    session.add(repo)
    session.flush()
    return repo


def set_dependencies(session: Session, repo: Repository, wanted: Sequence[Dependency]) -> None:
    """Check `wanted` (and the undeclared submodules) at the repository's default branch and
    store them (service/repos/dependencies.py). Raises BadRequest, changing nothing."""
    found = dependencies.check(session, mirror_of(repo), repo.default_branch, wanted, mirror_of)
    repo.dependencies = [d.model_dump(mode="json", exclude_none=True) for d in found]


def get(session: Session, name_or_id: str | int) -> Repository:
    by_id = str(name_or_id).isdigit() and int(name_or_id) <= MAX_ID
    repo = session.get(Repository, int(name_or_id)) if by_id else repository.get_by_name(session, str(name_or_id))
    if repo is None:
        raise NotFound(f"no repository {name_or_id!r} is registered (register it with POST /api/repositories)")
    return repo


def update(session: Session, name_or_id: str | int, data: RepositoryUpdate) -> Repository:
    """Replace the repository's PR policy. Raises NotFound."""
    repo = get(session, name_or_id)
    repo.pr_policy = data.pr_policy.model_dump(exclude_none=True)
    session.flush()
    return repo


def record_revisions(session: Session, repo: Repository, commits: Sequence[CommitInfo]) -> list[Revision]:
    """Insert the commits not stored yet (concurrent submissions of one range insert them once);
    return the rows in the order given."""
    known = repository.revisions_by_sha(session, repo.id, [c.sha for c in commits])
    # Commit metadata is the repository's content: fit it to the columns, never fail on it.
    missing = [
        {"repository_id": repo.id, "sha": c.sha, "parent_sha": c.parent_sha, "author": c.author[:200],
         "authored_at": c.authored_at, "subject": c.subject.replace("\x00", ""),
         "pr_number": c.pr_number if c.pr_number is not None and c.pr_number <= MAX_ID else None,
         "position": c.position}
        for c in commits if c.sha not in known
    ]
    insert_or_skip(session, Revision, missing, ["repository_id", "sha"])
    if missing:
        known = repository.revisions_by_sha(session, repo.id, [c.sha for c in commits])
    for commit in commits:
        row = known[commit.sha]
        if row.position is None and commit.position is not None:
            row.position = commit.position  # first seen as a PR head, now on the branch
            repository.set_case_point_positions(session, row)
    session.flush()
    return [known[c.sha] for c in commits]
