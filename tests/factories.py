"""Small create_x() helpers for tests: rows through the same services the API uses."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from perfbisect.service.models import Repository
from perfbisect.service.repos import service as repos
from perfbisect.service.repos.schemas import RepositoryCreate


def create_repository(session: Session, path: Path, name: str = "minikern", **kw) -> Repository:
    return repos.create(session, RepositoryCreate(name=name, url=str(path), **kw))
