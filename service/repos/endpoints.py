from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from perfbisect.service.api.deps import AdminDep, SessionDep, ViewerDep
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import NO_NUL
from perfbisect.service.repos import repository, service
from perfbisect.service.repos.schemas import RepositoryCreate, RepositoryRead, RepositoryUpdate
from perfbisect.service.suites import service as suites
from perfbisect.service.suites.schemas import BenchmarkSetCreate, BenchmarkSetRead

router = APIRouter(prefix="/api/repositories", tags=["repositories"], responses=ERROR_RESPONSES)

RepositoryName = Annotated[str, Path(max_length=100, pattern=NO_NUL, description="name (or id) of a repository")]
SetName = Annotated[str, Path(max_length=100, pattern=NO_NUL, description="name of a benchmark set")]


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


@router.patch("/{name}", response_model=RepositoryRead)
def update_repository(session: SessionDep, admin: AdminDep, name: RepositoryName, body: RepositoryUpdate) -> RepositoryRead:
    """Admin only: set the pull-request bot's policy (what a PR measures, how the gate reads an
    undecided compare)."""
    return RepositoryRead.of(service.update(session, name, body), reveal=True)


@router.post("/{name}/benchmark-sets", status_code=status.HTTP_201_CREATED, response_model=BenchmarkSetRead)
def register_benchmark_set(session: SessionDep, admin: AdminDep, name: RepositoryName,
                           body: BenchmarkSetCreate) -> BenchmarkSetRead:
    """Admin only: register (or replace) a named set of suites, targets and shape presets; a
    suite_source is stored by its sha256. Jobs name it with `benchmark_set`."""
    repo = service.get(session, name)
    return suites.set_read(session, repo, suites.register_set(session, repo, body))


@router.get("/{name}/benchmark-sets", response_model=list[BenchmarkSetRead])
def list_benchmark_sets(session: SessionDep, viewer: ViewerDep, name: RepositoryName) -> list[BenchmarkSetRead]:
    return suites.sets_of(session, service.get(session, name))


@router.get("/{name}/benchmark-sets/{set_name}", response_model=BenchmarkSetRead)
def get_benchmark_set(session: SessionDep, viewer: ViewerDep, name: RepositoryName,
                      set_name: SetName) -> BenchmarkSetRead:
    repo = service.get(session, name)
    return suites.set_read(session, repo, suites.get_set(session, repo, set_name))
