"""Registering repositories and recording their revisions. Flushes, never commits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from service.errors import BadRequest, Conflict, NotFound
from service.models import Repository, Revision
from service.repos import repository
from service.repos.schemas import RepositoryCreate
from service.settings import get_settings
from workers.checkout import CommitInfo, GitError, Mirror


def mirror_of(repo: Repository) -> Mirror:
    return Mirror(get_settings().mirrors_dir, repo.name, repo.url)


def create(session: Session, data: RepositoryCreate, *, verify: bool = True) -> Repository:
    """Register a repository; with `verify`, clone its mirror first so a bad URL is a 422 now,
    not a failed job later. Raises Conflict for a taken name, BadRequest for an unusable URL."""
    if repository.get_by_name(session, data.name) is not None:
        raise Conflict(f"a repository named {data.name!r} is already registered")
    repo = Repository(**data.model_dump())
    if verify:
        try:
            mirror_of(repo).ensure()
        except GitError as exc:
            raise BadRequest(str(exc)) from exc
    session.add(repo)
    session.flush()
    return repo


def get(session: Session, name_or_id: str | int) -> Repository:
    repo = (
        session.get(Repository, int(name_or_id))
        if str(name_or_id).isdigit()
        else repository.get_by_name(session, str(name_or_id))
    )
    if repo is None:
        raise NotFound(f"no repository {name_or_id!r} is registered (register it with POST /api/repositories)")
    return repo


def record_revisions(session: Session, repo: Repository, commits: Sequence[CommitInfo]) -> list[Revision]:
    """Insert the commits not stored yet; return the rows in the order given."""
    known = repository.revisions_by_sha(session, repo.id, [c.sha for c in commits])
    rows = []
    for commit in commits:
        row = known.get(commit.sha)
        if row is None:
            row = Revision(
                repository_id=repo.id,
                sha=commit.sha,
                parent_sha=commit.parent_sha,
                author=commit.author,
                authored_at=commit.authored_at,
                subject=commit.subject,
                pr_number=commit.pr_number,
                position=commit.position,
            )
            session.add(row)
        elif row.position is None and commit.position is not None:
            row.position = commit.position  # first seen as a PR head, now on the branch
            repository.set_case_point_positions(session, row)
        rows.append(row)
    session.flush()
    return rows
