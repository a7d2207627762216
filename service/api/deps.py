"""Request dependencies. The session dependency owns the request's transaction: commit when the
route returned, roll back when it raised, then (and only then) send the tasks it queued.

Access: `Authorization: Bearer <token>` names a Principal. Writes need a scope (SubmitterDep,
TriagerDep, AdminDep: 401 without a token, 403 without the scope); reads take ViewerDep, which
is None for an anonymous caller while PERFBISECT_PUBLIC_READS is on, and a 401 when it is off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from perfbisect import dispatch
from perfbisect.service.auth import ratelimit
from perfbisect.service.auth import service as auth
from perfbisect.service.auth.principal import Principal, Scope
from perfbisect.service.db import session_scope
from perfbisect.service.errors import Forbidden, Unauthenticated
from perfbisect.service.settings import get_settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request's session. Making it does no I/O (a Session connects at its first statement,
    in the route's thread), so it is made on the event loop. Its end (commit or rollback, close,
    then the queued tasks) runs in the thread pool, except a read's that queued no task: its
    statements autocommit, so its end sends nothing to the database (tests/test_db_sessions.py
    checks) and runs on the event loop too. Each hop to the pool costs the loop about 0.1 ms of
    a job read's 1.5 ms of CPU."""
    reads_only = request.method in ("GET", "HEAD")
    scope = session_scope(reads_only=reads_only)
    session = scope.__enter__()
    try:
        yield session
    except BaseException as exc:
        await _run(reads_only, scope.__exit__, type(exc), exc, exc.__traceback__)
        raise
    await _run(reads_only and not dispatch.queued(session), _finish, scope, session)


async def _run(inline: bool, function: Callable[..., object], *args: object) -> None:
    if inline:
        function(*args)
    else:
        await run_in_threadpool(function, *args)


def _finish(scope: AbstractContextManager[Session], session: Session) -> None:
    scope.__exit__(None, None, None)
    dispatch.send_committed(session)


# scope="function": the commit happens before the response is sent, so a client that reads the
# job right after a 202 always finds it.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

# auto_error=False: a missing header is anonymous (public reads), not FastAPI's bare 403.
bearer = HTTPBearer(auto_error=False, description="an API token from `perfbisect token create NAME --scope S`")


def authenticated(request: Request, session: Session, token: str) -> Principal:
    """The token's principal, under the rate limits (service/auth/ratelimit.py): a bad token is
    counted, and gets 429 from an address that sent too many lately; a token past its rate gets
    429. A valid token is never refused for the bad ones sent from its address."""
    address = request.client.host if request.client else None
    try:
        principal = auth.authenticate(session, token)
    except Unauthenticated:
        ratelimit.check_address(address)
        ratelimit.bad_token(address)
        raise
    ratelimit.token_request(principal.token_id, principal.name)
    return principal


async def get_principal(
    request: Request, session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal | None:
    """The token's principal, None without a token; a wrong or revoked token is a 401 even on
    a public read, so a client never silently runs with less than it thinks it has. Async: only
    a token's lookup (SQL, and Redis for the rate limits) goes to the thread pool."""
    if credentials is None:
        return None
    return await run_in_threadpool(authenticated, request, session, credentials.credentials)


OptionalPrincipal = Annotated[Principal | None, Depends(get_principal)]


async def get_viewer(
    request: Request, session: SessionDep, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Principal | None:
    """A reader: anonymous (None) while reads are public, else a token with the read scope.
    The header is read directly, not through `bearer`: the schema then says, as is true by
    default, that reads need no credentials."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        principal = await run_in_threadpool(authenticated, request, session, token.strip())
        if not principal.allows(Scope.read):
            raise Forbidden(f"the token {principal.name!r} lacks the read scope")
        return principal
    if not get_settings().public_reads:
        raise Unauthenticated("reading needs a token with the read scope (PERFBISECT_PUBLIC_READS is off)")
    return None


def require(scope: Scope) -> Callable[[Principal | None], Awaitable[Principal]]:
    async def dependency(principal: OptionalPrincipal) -> Principal:  # no I/O: no hop to the thread pool
        if principal is None:
            raise Unauthenticated(f"this needs a token with the {scope.value} scope: "
                                  "send 'Authorization: Bearer <token>' (perfbisect token create)")
        if not principal.allows(scope):
            raise Forbidden(f"the token {principal.name!r} lacks the {scope.value} scope")
        return principal

    return dependency


ViewerDep = Annotated[Principal | None, Depends(get_viewer)]
SubmitterDep = Annotated[Principal, Depends(require(Scope.submit))]
TriagerDep = Annotated[Principal, Depends(require(Scope.triage))]
AdminDep = Annotated[Principal, Depends(require(Scope.admin))]
