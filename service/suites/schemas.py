from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from perfbisect.service.jobs.schemas import Benchmark, SetName


class BenchmarkSetCreate(BaseModel):
    """A named benchmark set of a repository: suites (built in, in the repository, or sent as
    suite_source) with their targets and shape presets, for the jobs that name it."""

    name: SetName = Field(examples=["attention-long"])
    benchmarks: list[Benchmark] = Field(min_length=1, max_length=32)


class SuiteSourceRead(BaseModel):
    suite: str = Field(description="the suite name its cases carry: source:<label>@<sha256 prefix>")
    sha256: str
    bytes: int


class BenchmarkSetRead(BaseModel):
    name: str
    repository: str
    cases: list[dict[str, Any]] = Field(description="the resolved cases: suite, target, params, name")
    sources: list[SuiteSourceRead] = []
