"""Alerts as the API shows them, and the triage a person sends."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

TriageStatus = Literal["new", "acknowledged", "invalid", "fixed", "expected"]


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
    cases: list[AlertCaseRead]


class AlertUpdate(BaseModel):
    status: TriageStatus | None = None
    note: str | None = Field(default=None, max_length=2000)
