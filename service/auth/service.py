"""Creating, checking and revoking API tokens. Flushes, never commits.

A token is `pbt_` + 32 random bytes (URL-safe base64); only its sha256 is stored, so a leaked
database does not leak usable tokens. A hash of 256 random bits needs no salt or slow KDF: there
is nothing to guess. The token is shown once, when it is created.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Sequence
from datetime import timedelta, timezone

from sqlalchemy.orm import Session

from perfbisect.service.auth import repository
from perfbisect.service.auth.principal import Principal, Scope
from perfbisect.service.errors import BadRequest, Conflict, NotFound, Unauthenticated
from perfbisect.service.models import ApiToken, utcnow

TOKEN_PREFIX = "pbt_"
# last_used_at is a hint for `token list`; writing it on every request would make reads writes.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_scopes(names: Iterable[str]) -> list[Scope]:
    """Scope names -> Scopes, in order, without repeats. Raises BadRequest for an unknown name."""
    scopes: list[Scope] = []
    for name in names:
        try:
            scope = Scope(name.strip())
        except ValueError as exc:
            raise BadRequest(f"unknown scope {name!r}: use {', '.join(s.value for s in Scope)}") from exc
        if scope not in scopes:
            scopes.append(scope)
    if not scopes:
        raise BadRequest("a token needs at least one scope")
    return scopes


def create_token(session: Session, name: str, scopes: Sequence[Scope]) -> tuple[ApiToken, str]:
    """A new token named `name`; returns the row and the token (shown once). Raises Conflict."""
    if repository.by_name(session, name) is not None:
        raise Conflict(f"a token named {name!r} exists (revoke it or pick another name)")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, token_hash=hash_token(token), prefix=token[:12],
                   scopes=[s.value for s in scopes])
    session.add(row)
    session.flush()
    return row, token


def principal_of(row: ApiToken) -> Principal:
    return Principal(token_id=row.id, name=row.name, scopes=frozenset(Scope(s) for s in row.scopes))


def authenticate(session: Session, token: str) -> Principal:
    """The principal of a live token. Raises Unauthenticated for an unknown or revoked one."""
    digest = hash_token(token)
    row = repository.by_hash(session, digest)
    # The lookup is by hash (its timing says nothing about the token); compare once more in
    # constant time so the check does not rest on the database's comparison alone.
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        raise Unauthenticated("the bearer token is not valid")
    if row.revoked_at is not None:
        raise Unauthenticated(f"the token {row.name!r} was revoked")
    now, last = utcnow(), row.last_used_at
    if last is not None and last.tzinfo is None:  # SQLite hands back naive UTC datetimes
        last = last.replace(tzinfo=timezone.utc)
    if last is None or now - last > LAST_USED_RESOLUTION:
        row.last_used_at = now
    return principal_of(row)


def find(session: Session, name_or_id: str) -> ApiToken:
    by_id = name_or_id.isdigit() and len(name_or_id) < 10  # ids are 32-bit
    row = session.get(ApiToken, int(name_or_id)) if by_id else repository.by_name(session, name_or_id)
    if row is None:
        raise NotFound(f"no token {name_or_id!r}")
    return row


def revoke(session: Session, name_or_id: str) -> ApiToken:
    """Revoke a token (kept, so jobs still name their submitter). Raises NotFound."""
    row = find(session, name_or_id)
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row


def list_tokens(session: Session) -> Sequence[ApiToken]:
    return repository.list_all(session)
