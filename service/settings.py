"""One typed settings object shared by the API, the workers, the CLI and the migrations.

Every field reads an environment variable of the same name with the ``PERFBISECT_`` prefix,
except the two that switch the deployment: ``DATABASE_URL`` and ``REDIS_URL``. With neither
set, perfbisect runs embedded: SQLite in ``var/`` and the Celery tasks executed in-process.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path("var")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PERFBISECT_", extra="ignore")

    environment: Literal["development", "testing", "production"] = "development"
    home: Path = Field(default=DEFAULT_HOME, description="mirrors, worktrees, SQLite file, logs")
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "PERFBISECT_DATABASE_URL")
    )
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "PERFBISECT_REDIS_URL")
    )
    # Bisect limits and defaults.
    max_range: int = 2000
    default_min_effect: float = 0.02
    default_workers: int = 1
    max_trials_per_revision: int = 12
    # Worker behaviour.
    build_timeout_s: int = 900
    trial_timeout_s: int = 900
    device_class: str = "cpu"
    visibility_timeout_s: int = 3600
    embedded_workers: int = Field(default=1, ge=1, le=64, description="trials run at once without a broker")
    # GitHub PR bot; no token means comments are rendered but not posted.
    github_token: str | None = None
    github_api_url: str = "https://api.github.com"
    webhook_secret: str | None = None
    public_url: str | None = Field(default=None, description="where people reach the dashboard, for links in PR comments")

    @model_validator(mode="after")
    def _refuse_placeholders_in_production(self) -> Settings:
        if self.environment == "production":
            if not self.database_url or self.database_url.startswith("sqlite"):
                raise ValueError("production needs DATABASE_URL pointing at PostgreSQL")
            if not self.redis_url:
                raise ValueError("production needs REDIS_URL (Celery workers)")
            if self.webhook_secret in (None, "", "changeme"):
                raise ValueError("production needs PERFBISECT_WEBHOOK_SECRET set to a real secret")
        return self

    @property
    def embedded(self) -> bool:
        """No broker configured: tasks run in-process (Celery eager mode)."""
        return not self.redis_url

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            url = self.database_url
            # Accept the common postgres:// and postgresql:// spellings; drive them with psycopg 3.
            for prefix in ("postgres://", "postgresql://"):
                if url.startswith(prefix):
                    return "postgresql+psycopg://" + url[len(prefix) :]
            return url
        return f"sqlite:///{(self.home / 'perfbisect.sqlite').resolve()}"

    @property
    def mirrors_dir(self) -> Path:
        return self.home / "mirrors"

    @property
    def worktrees_dir(self) -> Path:
        return self.home / "worktrees"


@lru_cache
def get_settings() -> Settings:
    return Settings()
