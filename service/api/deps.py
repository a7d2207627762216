"""Request dependencies. The session dependency owns the request's transaction: commit when the
route returned, roll back when it raised, then (and only then) send the tasks it queued."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends
from sqlalchemy.orm import Session

from service.db import session_scope
from workers import dispatch


def get_session() -> Iterator[Session]:
    with session_scope() as session:
        yield session
    dispatch.send_committed(session)


# scope="function": the commit happens before the response is sent, so a client that reads the
# job right after a 202 always finds it.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
