"""Tracked branches: what the API and CLI accept and answer, and the part of GitHub's `push`
event the tracker reads."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfbisect.service.jobs.schemas import DeviceClass, HarnessPolicy, RepositoryName
from perfbisect.service.suites.schemas import Benchmark, SetName


Trigger = Literal["push", "schedule", "poll"]
CONFIRM_TRIALS_HELP = ("before a performance step alerts, re-measure the last head before it and the first after it "
                       "side by side (alternating, so the machine's load of that moment is the same for both) with "
                       "this many trials each; it alerts when that re-measure shows it. 0: alert at once")


class TrackedBranchCreate(BaseModel):
    repository: RepositoryName = Field(description="name of a registered repository")
    branch: str = Field(default="main", pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}$", examples=["main"])
    benchmarks: list[Benchmark] | None = Field(default=None, min_length=1,
                                               description="the benchmarks measured at every head")
    benchmark_set: SetName | None = Field(default=None, description="instead of benchmarks: a set registered on "
                                          "the repository (its cases are copied when tracking starts)")
    device_class: DeviceClass = Field(default="cpu", examples=["cpu", "cuda", "h200"])
    trigger: Trigger = Field(
        default="push", description="push webhook; schedule (every interval_s); poll (every interval_s, "
                                    "only when the head moved)")
    interval_s: int = Field(default=3600, ge=60, le=7 * 86400)
    backfill_every: int = Field(default=1, ge=1, le=1000, description="measure every k-th commit ...")
    backfill_depth: int = Field(default=1, ge=1, le=2000, description="... of the last M first-parent commits")
    trials_per_head: int = Field(default=3, ge=1, le=20)
    min_magnitude: float = Field(default=0.05, gt=0, lt=1, description="smallest relative step that alerts")
    max_bisects: int = Field(default=2, ge=0, le=32, description="alert bisects running at once")
    confirm_trials: int = Field(default=3, ge=0, le=20, description=CONFIRM_TRIALS_HELP)
    metric: Literal["ratio", "raw"] = "ratio"
    policy: HarnessPolicy | None = Field(default=None, description="harness sample policy override")
    start: bool = Field(default=True, description="run the backfill now")

    @model_validator(mode="after")
    def _one_form(self) -> TrackedBranchCreate:
        if (self.benchmarks is None) == (self.benchmark_set is None):
            raise ValueError("give benchmarks or benchmark_set, not both or neither")
        return self


class TrackedBranchUpdate(BaseModel):
    """What `PATCH /api/tracked-branches/{id}` and `perfbisect track edit` change; what is left
    out stays. New cases apply from the next run on (measured heads keep their trials)."""

    model_config = ConfigDict(extra="forbid")

    trigger: Trigger | None = None
    interval_s: int | None = Field(default=None, ge=60, le=7 * 86400)
    benchmarks: list[Benchmark] | None = Field(default=None, min_length=1)
    benchmark_set: SetName | None = Field(default=None, description="instead of benchmarks: a set registered on "
                                          "the repository (its cases are copied now)")
    confirm_trials: int | None = Field(default=None, ge=0, le=20, description=CONFIRM_TRIALS_HELP)

    @model_validator(mode="after")
    def _something(self) -> TrackedBranchUpdate:
        if self.benchmarks is not None and self.benchmark_set is not None:
            raise ValueError("give benchmarks or benchmark_set, not both")
        if all(getattr(self, name) is None for name in type(self).model_fields):
            raise ValueError("nothing to change: give trigger, interval_s, benchmarks, benchmark_set or confirm_trials")
        return self


class TrackedBranchRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    repository: str
    branch: str
    device_class: str
    cases: list[dict[str, Any]]
    trigger: str
    interval_s: int
    backfill_every: int
    backfill_depth: int
    trials_per_head: int
    min_magnitude: float
    max_bisects: int
    confirm_trials: int
    metric: str
    last_sha: str | None
    last_run_at: datetime | None = Field(description="when a run last looked at the branch (push, beat or a person)")
    next_run_at: datetime | None = Field(
        default=None, description="schedule and poll: when the next run is due (beat, or the embedded server, "
                                  "looks every minute); None for push")
    created_at: datetime


class TrackRunAccepted(BaseModel):
    tracked_branch_id: int
    message: str


class PushEvent(BaseModel):
    """GitHub's `push` event: the branch (`refs/heads/<name>`) and its new head."""

    model_config = ConfigDict(extra="ignore")

    ref: str
    after: str = Field(pattern=r"^[0-9a-fA-F]{7,64}$")
    deleted: bool = False
    repository: dict[str, Any] = Field(description="full_name, clone_url, ssh_url, html_url")

    @property
    def branch(self) -> str | None:
        return self.ref.removeprefix("refs/heads/") if self.ref.startswith("refs/heads/") else None
