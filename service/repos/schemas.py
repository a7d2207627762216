from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class RepositoryCreate(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$", examples=["minikern"])
    url: str = Field(min_length=1, description="git URL or local path of the repository")
    build_command: str | None = Field(default=None, examples=["pip install -e . --no-deps"])
    import_root: str = Field(default=".", pattern=r"^[A-Za-z0-9_./-]+$", examples=[".", "src"])
    env: dict[str, str] = Field(default_factory=dict, examples=[{"FLYDSL_RUNTIME_ENABLE_CACHE": "0"}])
    default_branch: str = "main"


class RepositoryRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    url: str
    build_command: str | None
    import_root: str
    env: dict[str, str]
    default_branch: str
    created_at: datetime
