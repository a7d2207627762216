"""All SQL about notification subscriptions and deliveries."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from perfbisect.service.notifications.models import Delivery, Event, Subscription


def matching(session: Session, repository_id: int, branch: str | None, event: Event) -> list[Subscription]:
    """Subscriptions of the repository to `event`: those of every branch, and those of `branch`."""
    branches = Subscription.branch.is_(None) if branch is None else \
        or_(Subscription.branch.is_(None), Subscription.branch == branch)
    rows = session.scalars(select(Subscription).where(Subscription.repository_id == repository_id, branches)
                           .order_by(Subscription.id))
    return [s for s in rows if event.value in s.events]  # a JSON list: filtered here, subscriptions are few


def subscriptions(session: Session, repository_id: int | None = None) -> Sequence[Subscription]:
    stmt = select(Subscription).order_by(Subscription.id)
    if repository_id is not None:
        stmt = stmt.where(Subscription.repository_id == repository_id)
    return session.scalars(stmt).all()


def deliveries(session: Session, *, subscription_id: int | None = None, status: str | None = None,
               limit: int = 100) -> Sequence[Delivery]:
    stmt = select(Delivery).order_by(Delivery.id.desc()).limit(limit)
    if subscription_id is not None:
        stmt = stmt.where(Delivery.subscription_id == subscription_id)
    if status is not None:
        stmt = stmt.where(Delivery.status == status)
    return session.scalars(stmt).all()


def delivery(session: Session, delivery_id: int, *, lock: bool = False) -> Delivery | None:
    stmt = select(Delivery).where(Delivery.id == delivery_id)
    return session.scalars(stmt.with_for_update() if lock else stmt).one_or_none()


def notified(session: Session, subscription_ids: list[int], event: Event, key: str) -> set[int]:
    """Which of the subscriptions already have a delivery of this event about `key`."""
    if not subscription_ids:
        return set()
    stmt = select(Delivery.subscription_id).where(Delivery.subscription_id.in_(subscription_ids),
                                                  Delivery.event == event, Delivery.payload["key"].as_string() == key)
    return set(session.scalars(stmt))
