from __future__ import annotations

from fastapi import APIRouter, status

from service.api.deps import SessionDep
from service.repos import repository, service
from service.repos.schemas import RepositoryCreate, RepositoryRead

router = APIRouter(prefix="/api/repositories", tags=["repositories"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RepositoryRead)
def register_repository(session: SessionDep, body: RepositoryCreate) -> RepositoryRead:
    return RepositoryRead.model_validate(service.create(session, body))


@router.get("", response_model=list[RepositoryRead])
def list_repositories(session: SessionDep) -> list[RepositoryRead]:
    return [RepositoryRead.model_validate(r) for r in repository.list_all(session)]


@router.get("/{name}", response_model=RepositoryRead)
def get_repository(session: SessionDep, name: str) -> RepositoryRead:
    return RepositoryRead.model_validate(service.get(session, name))
