from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi.responses import PlainTextResponse

from perfbisect.service.api.deps import SessionDep, get_viewer
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.errors import NotFound
from perfbisect.service.suites import repository

router = APIRouter(prefix="/api/suite-sources", tags=["jobs"], responses=ERROR_RESPONSES,
                   dependencies=[Depends(get_viewer)])

# Declared by hand (as the job report is): with response_class=PlainTextResponse FastAPI would
# document the JSON error bodies as text/plain too.
TEXT_RESPONSES = {200: {"description": "the file's text", "content": {"text/plain": {"schema": {"type": "string"}}}}}
Sha256 = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="sha256 of the suite file's text")]


@router.get("/{sha256}", response_model=None, responses=TEXT_RESPONSES)
def get_suite_source(session: SessionDep, sha256: Sha256) -> PlainTextResponse:
    """The text of a suite file sent with a job (its sha256 is in the job's spec.suite_sources)."""
    found = repository.sources_by_sha(session, [sha256])
    if sha256 not in found:
        raise NotFound(f"no suite file with sha256 {sha256}")
    return PlainTextResponse(found[sha256])
