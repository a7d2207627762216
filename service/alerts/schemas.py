"""Alerts as the API shows them, and the triage a person sends."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from perfbisect.service.bounds import MAX_ID

TriageStatus = Literal["new", "acknowledged", "investigating", "invalid", "fixed", "expected"]
# An issue link: an http(s) URL, or a short reference such as #123 or PROJ-7 (shown as text).
BUG = r"^(https?://[^\s<>\"]+|[\w.#/-]{1,100})$"
PERSON = r"^[^\x00-\x1f<>]{1,100}$"


class AlertCaseRead(BaseModel):
    case: str
    kind: str
    rel: float | None = Field(description="after/before - 1 of the case's levels (None for wrong results)")
    pvalue: float | None
    before: float | None
    after: float | None


class AlertRead(BaseModel):
    id: int
    tracked_branch_id: int
    repository: str
    branch: str
    branches: list[str] = Field(default_factory=list, description=(
        "every tracked branch that reached this change: its own first, then those that attached to it"))
    kind: str
    status: str
    magnitude: float
    before_sha: str = Field(description="the last measured head before the step")
    first_sha: str = Field(description="the first commit that may hold the step")
    last_sha: str = Field(description="the first measured head after it")
    culprit_first_sha: str | None
    culprit_last_sha: str | None
    culprit_exact: bool
    culprit_subject: str | None = None
    culprit_pr: int | None
    bisect_job_id: int | None
    fixed_by_id: int | None
    note: str | None
    comments: dict[str, str | None]
    detections: int
    created_at: datetime
    updated_at: datetime
    triaged_at: datetime | None
    triaged_by: str | None = Field(None, description="the token name of the last triage")
    assignee: str | None = None
    bug: str | None = Field(None, description="an issue URL or reference")
    cases: list[AlertCaseRead]


class AlertUpdate(BaseModel):
    """A triage: each field sent is set (an empty assignee, bug or note clears it), each field
    left out is kept. Unknown fields are a 422, not silently dropped."""

    model_config = ConfigDict(extra="forbid")

    status: TriageStatus | None = None
    note: str | None = Field(default=None, max_length=2000)
    assignee: str | None = Field(default=None, max_length=100, pattern=PERSON + "|^$")
    bug: str | None = Field(default=None, max_length=500, pattern=BUG + "|^$",
                            description="an issue URL (http/https) or a reference such as #123")
    reason: str | None = Field(default=None, max_length=500, pattern=r"\S",
                               description="why: kept with each change in the alert's history")


class AlertBulkUpdate(AlertUpdate):
    """The same triage for several alerts at once, all or none; the reason is required (it is
    recorded on every alert the change touched)."""

    ids: list[Annotated[int, Field(ge=1, le=MAX_ID)]] = Field(min_length=1, max_length=200)
    reason: str = Field(max_length=500, pattern=r"\S", description="why: kept with each change on every alert")


class AlertChangeRead(BaseModel):
    at: datetime
    by: str
    field: str
    old: str | None
    new: str | None
    reason: str | None = None
