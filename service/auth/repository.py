"""All SQL about API tokens."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfbisect.service.models import ApiToken


def by_hash(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalars(select(ApiToken).where(ApiToken.token_hash == token_hash)).one_or_none()


def by_name(session: Session, name: str) -> ApiToken | None:
    return session.scalars(select(ApiToken).where(ApiToken.name == name)).one_or_none()


def list_all(session: Session) -> Sequence[ApiToken]:
    return session.scalars(select(ApiToken).order_by(ApiToken.id)).all()


def lock(session: Session, token_id: int) -> None:
    """Take the token's row lock until the transaction ends: its submissions count their quota
    one at a time."""
    session.execute(select(ApiToken.id).where(ApiToken.id == token_id).with_for_update())
