"""The evidence of one culprit (issue 43), as the API and `--json` give it. Every section says
whether it is `available` and, when not (or only partly), `reason`: "no evidence of this kind,
because ..."."""
from __future__ import annotations

from typing import Any

from perfbisect.service.hunks.schemas import HunkEvidence
from pydantic import BaseModel, Field


class Section(BaseModel):
    available: bool = Field(description="whether this kind of evidence could be gathered")
    reason: str | None = Field(default=None, description="why it is missing (or partial)")


class KernelRow(BaseModel):
    name: str = Field(description="the GPU kernel (or, on the CPU, the operator: its self time)")
    status: str = Field(description="changed, same, added (after only) or removed (before only)")
    before_ms: float = Field(description="time per target call before the culprit")
    after_ms: float
    delta_ms: float
    calls_before: float | None = Field(default=None, description="launches per profiled target call (older "
                                       "tables: launches over all the profiled calls)")
    calls_after: float | None = None
    grid_before: list[int] | None = None
    grid_after: list[int] | None = None
    block_before: list[int] | None = None
    block_after: list[int] | None = None


class CaseKernels(BaseModel):
    case: str
    rows: list[KernelRow] = Field(description="ranked by absolute change per target call")
    total_before_ms: float
    total_after_ms: float
    total_delta_ms: float
    headline: str | None = Field(default=None, description="which kernel carries the step: \"`k` +3.1 ms of +3.2 ms\"")
    reason: str | None = Field(default=None, description="why this case has no table (the profiler failed ...)")


class KernelSection(Section):
    cases: list[CaseKernels] = []


class FieldChange(BaseModel):
    field: str
    before: Any = None
    after: Any = None


class OpDelta(BaseModel):
    op: str
    before: int
    after: int
    delta: int


class KernelCode(BaseModel):
    name: str = Field(description="the Triton kernel (name#n where one name compiled several times)")
    status: str = Field(description="changed, same, added or removed")
    metadata: list[FieldChange] = Field(description="num_warps, num_stages, shared, registers ... that differ")
    ops: dict[str, list[OpDelta]] = Field(
        description="per IR level (ttir, ttgir, llir, ptx, amdgcn; fly: FlyDSL's source MLIR): count deltas")
    ttgir_diff: str | None = Field(default=None, description="a bounded unified diff of the IR named by diff_ir")
    ttgir_diff_truncated: bool = False
    ir_levels: list[str] = []
    diff_ir: str = Field(default="ttgir", description="the IR of ttgir_diff: ttgir (Triton) or fly (FlyDSL's source MLIR)")


class CompiledSection(Section):
    kernels: list[KernelCode] = []


class AutotuneChoice(BaseModel):
    kernel: str
    key: str = Field(description="the autotuner's key (the shape and dtypes it tuned for)")
    before: dict[str, Any] | None = Field(default=None, description="the configuration chosen before")
    after: dict[str, Any] | None = None
    flipped: bool


class AutotuneSection(Section):
    flipped: bool = Field(default=False, description="the step comes with a different configuration chosen")
    choices: list[AutotuneChoice] = []


class EnvironmentSection(Section):
    same: bool | None = None
    differences: list[FieldChange] = []


class CulpritEvidence(BaseModel):
    job_id: int
    first_sha: str
    last_sha: str
    before_sha: str | None = Field(default=None, description="the revision profiled before the culprit")
    after_sha: str | None = Field(default=None, description="the revision profiled at the culprit")
    summary: list[str] = Field(description="the report's 'why' lines")
    hunks: HunkEvidence = Field(description="hunk localization's answer (service/hunks), where it ran")
    kernels: KernelSection
    compiled: CompiledSection
    autotune: AutotuneSection
    environment: EnvironmentSection
