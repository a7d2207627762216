"""Hunk evidence as the API serves it (issue 43): per confirmed culprit and case, the hunks of
its diff that carry its step, or why there is no evidence of this kind."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class HunkRead(BaseModel):
    index: int = Field(description="the hunk's number in the culprit's diff, as searched (kept files only)")
    path: str
    lines: str = Field(description="'path:first-last' on the culprit's side")
    section: str = Field(default="", description="what git shows after the @@: the enclosing definition")
    text: str = Field(description="the changed lines with one line of context, trimmed")


class ShareRead(BaseModel):
    share: float = Field(description="the subset's step over the culprit's step (log scale): 1 is all of it")
    ci: tuple[float, float] = Field(description="95% interval of its own step over the culprit's step")


class BrokenRead(BaseModel):
    hunks: list[int]
    problem: str = Field(description="does not apply / build / import: recorded, never blamed")


class CaseHunksRead(BaseModel):
    case: str
    status: Literal["found", "group", "none"] = Field(
        description="found: one hunk; group: hunks that only carry the step together; none: see `reason`")
    reason: str | None = None
    hunks: list[HunkRead] = []
    share: ShareRead | None = None
    rounds: int = Field(default=0, description="rounds of variants measured (two a round, each in a block)")
    bound: int = Field(default=0, description="ceil(log2 H) + 2: the rounds one responsible hunk among H costs")
    broken: list[BrokenRead] = []


class CulpritHunksRead(BaseModel):
    label: str
    first_sha: str
    last_sha: str
    commits: int = Field(default=1, description="commits in the culprit's range: >1 searches their combined diff")
    searched_hunks: int = Field(default=0, description="text hunks of the files the trials imported")
    set_aside: list[dict[str, str]] = Field(default=[], description="files not searched, each with its reason")
    skipped: str | None = Field(default=None, description="why this culprit has no hunk evidence at all")
    cases: list[CaseHunksRead] = []
    trials: int = 0


class HunkEvidence(BaseModel):
    """The hunk evidence of one culprit of a bisect (`GET /api/jobs/{id}/culprits/{sha}/evidence`'s
    hunk part). `available` false: no evidence of this kind, because `reason`."""

    job_id: int = Field(description="the bisect")
    sha: str
    available: bool
    reason: str | None = None
    localization_job_id: int | None = None
    status: str | None = Field(default=None, description="the localization job's status")
    culprit: CulpritHunksRead | None = None
