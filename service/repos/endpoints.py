from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from perfbisect.service.api.deps import AdminDep, SessionDep, ViewerDep
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import NO_NUL
from perfbisect.service.repos import repository, service
from perfbisect.service.repos.schemas import RepositoryCreate, RepositoryRead

router = APIRouter(prefix="/api/repositories", tags=["repositories"], responses=ERROR_RESPONSES)

RepositoryName = Annotated[str, Path(max_length=100, pattern=NO_NUL, description="name (or id) of a repository")]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RepositoryRead)
def register_repository(session: SessionDep, admin: AdminDep, body: RepositoryCreate) -> RepositoryRead:
    """Admin only: the build command and env run on the workers."""
    return RepositoryRead.of(service.create(session, body), reveal=True)


@router.get("", response_model=list[RepositoryRead])
def list_repositories(session: SessionDep, viewer: ViewerDep) -> list[RepositoryRead]:
    reveal = viewer is not None and viewer.is_admin
    return [RepositoryRead.of(r, reveal=reveal) for r in repository.list_all(session)]


@router.get("/{name}", response_model=RepositoryRead)
def get_repository(session: SessionDep, viewer: ViewerDep, name: RepositoryName) -> RepositoryRead:
    return RepositoryRead.of(service.get(session, name), reveal=viewer is not None and viewer.is_admin)
