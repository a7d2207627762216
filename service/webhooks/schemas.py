"""The part of GitHub's `pull_request` event the bot reads, and its replies. Extra fields of
the payload are ignored."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from perfbisect.service.bounds import Id

HANDLED_ACTIONS = ("opened", "synchronize", "reopened")


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class GitRef(_Lenient):
    sha: str = Field(pattern=r"^[0-9a-fA-F]{7,64}$")
    ref: str | None = None


class PullRequest(_Lenient):
    number: Id
    head: GitRef
    base: GitRef
    html_url: str | None = None
    title: str | None = None


class PullRequestEvent(_Lenient):
    action: str = Field(max_length=100)
    number: Id | None = None
    pull_request: PullRequest
    repository: dict[str, Any] = Field(description="full_name, clone_url, ssh_url, html_url")


class WebhookReply(BaseModel):
    """What the webhook answers: a message, and the job when one was created (or found)."""

    message: str
    job_id: int | None = None
    url: str | None = None
    dashboard: str | None = None
    superseded: list[int] = Field(default_factory=list, description="older compare jobs of the PR, cancelled")
