"""All SQL about suite sources and benchmark sets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfbisect.service.models import BenchmarkSet, SuiteSource


def sources_by_sha(session: Session, shas: Iterable[str]) -> dict[str, str]:
    wanted = sorted(set(shas))
    if not wanted:
        return {}
    rows = session.execute(select(SuiteSource.sha256, SuiteSource.content).where(SuiteSource.sha256.in_(wanted)))
    return dict(rows.all())


def get_set(session: Session, repository_id: int, name: str) -> BenchmarkSet | None:
    return session.scalars(select(BenchmarkSet).where(
        BenchmarkSet.repository_id == repository_id, BenchmarkSet.name == name)).one_or_none()


def sets_of(session: Session, repository_id: int) -> Sequence[BenchmarkSet]:
    return session.scalars(select(BenchmarkSet).where(BenchmarkSet.repository_id == repository_id)
                           .order_by(BenchmarkSet.name)).all()
