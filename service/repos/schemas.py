from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfbisect.service.bounds import text
from perfbisect.service.models import Repository
from perfbisect.service.repos.urls import public_url

EnvName = text(100, min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
HIDDEN = "***"


class RepositoryCreate(BaseModel):
    """Registering is admin-only: the build command and env run on the workers."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$", examples=["minikern"])
    url: text(2000, min_length=1) = Field(description="git URL (https, ssh, git) or an absolute local path "
                                          "under PERFBISECT_LOCAL_REPO_ROOTS")
    build_command: text(10_000) | None = Field(default=None, examples=["pip install -e . --no-deps"])
    import_root: str = Field(default=".", max_length=200, pattern=r"^[A-Za-z0-9_./-]+$", examples=[".", "src"])
    env: Annotated[dict[EnvName, text(4000)], Field(max_length=64)] = Field(
        default_factory=dict, examples=[{"FLYDSL_RUNTIME_ENABLE_CACHE": "0"}])
    default_branch: str = Field(default="main", max_length=200, pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$")

    @field_validator("import_root")
    @classmethod
    def _inside_the_repository(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/"):
            raise ValueError("import_root is a relative path inside the repository (no '/' prefix, no '..')")
        return value


class RepositoryRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    url: str
    build_command: str | None
    import_root: str
    env: dict[str, str] = Field(description=f"values are {HIDDEN!r} unless the caller is an admin")
    default_branch: str
    created_at: datetime

    @classmethod
    def of(cls, repo: Repository, *, reveal: bool) -> RepositoryRead:
        """The row as a caller may see it: env values and URL credentials for admins only."""
        read = cls.model_validate(repo)
        if reveal:
            return read
        return read.model_copy(update={"url": public_url(read.url), "env": {k: HIDDEN for k in read.env}})
