"""GET /api/jobs/{id}/culprits/{sha}/evidence: why a culprit got slower (issue 43)."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from perfbisect.service.api.deps import SessionDep, get_viewer
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import MAX_ID
from perfbisect.service.evidence.schemas import CulpritEvidence
from perfbisect.service.evidence.service import evidence_of

router = APIRouter(prefix="/api/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

JobId = Annotated[int, Path(ge=1, le=MAX_ID)]
Sha = Annotated[str, Path(min_length=7, max_length=64, pattern=r"^[0-9a-fA-F]+$",
                          description="the culprit's first or last commit (at least 7 hex digits)")]


@router.get("/{job_id}/culprits/{sha}/evidence", response_model=CulpritEvidence, dependencies=[Depends(get_viewer)])
def culprit_evidence(session: SessionDep, job_id: JobId, sha: Sha) -> CulpritEvidence:
    """Why the culprit got slower: per case the kernel that carries the step (profiled at both
    ends), the compiled code's metadata, op counts and TTGIR diff, the autotuner's choice, the
    environment; each kind absent says why."""
    return evidence_of(session, job_id, sha)
