"""All SQL about repositories and revisions."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from perfbisect.service.models import CasePoint, Repository, Revision


def get_by_name(session: Session, name: str) -> Repository | None:
    return session.scalars(select(Repository).where(Repository.name == name)).one_or_none()


def list_all(session: Session) -> Sequence[Repository]:
    return session.scalars(select(Repository).order_by(Repository.id)).all()


def revisions_by_sha(session: Session, repository_id: int, shas: Sequence[str]) -> dict[str, Revision]:
    rows = session.scalars(
        select(Revision).where(Revision.repository_id == repository_id, Revision.sha.in_(list(shas)))
    ).all()
    return {row.sha: row for row in rows}


def set_case_point_positions(session: Session, revision: Revision) -> None:
    """Copy a revision's newly known position onto its case points (the history index)."""
    session.execute(update(CasePoint).where(CasePoint.revision_id == revision.id).values(position=revision.position))
