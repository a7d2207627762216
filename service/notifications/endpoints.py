"""Notification subscriptions and their delivery log: admin only (a subscription's target may
be a private URL, and a webhook's secret is shown once, in the answer to its creation)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from perfbisect.service.api.deps import AdminDep, SessionDep
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import MAX_ID
from perfbisect.service.models import Repository
from perfbisect.service.notifications import repository, service
from perfbisect.service.notifications.models import DeliveryStatus, Subscription
from perfbisect.service.notifications.schemas import DeliveryRead, SubscriptionCreate, SubscriptionRead

router = APIRouter(prefix="/api/notifications", tags=["notifications"], responses=ERROR_RESPONSES)
SubscriptionId = Annotated[int, Path(ge=1, le=MAX_ID)]


def _read(session: SessionDep, subscription: Subscription, *, with_secret: bool = False) -> SubscriptionRead:
    repo = session.get(Repository, subscription.repository_id)
    return SubscriptionRead(id=subscription.id, repository=repo.name if repo else "?", branch=subscription.branch,
                            events=subscription.events, channel=subscription.channel.value,
                            target=subscription.target, created_at=subscription.created_at,
                            secret=subscription.secret if with_secret else None)


@router.post("/subscriptions", response_model=SubscriptionRead, status_code=201)
def create_subscription(session: SessionDep, admin: AdminDep, body: SubscriptionCreate) -> SubscriptionRead:
    """Subscribe a webhook, a Slack incoming webhook or an email address to a repository's (or
    one branch's) alerts, culprits and gate failures. A webhook's body is signed: the header
    X-Perfbisect-Signature-256 holds 'sha256=' and the HMAC-SHA256 of the body under `secret`
    (generated when omitted, and shown only in this answer)."""
    return _read(session, service.subscribe(session, body, admin), with_secret=True)


@router.get("/subscriptions", response_model=list[SubscriptionRead])
def list_subscriptions(session: SessionDep, _admin: AdminDep) -> list[SubscriptionRead]:
    return [_read(session, s) for s in repository.subscriptions(session)]


@router.delete("/subscriptions/{subscription_id}", status_code=204)
def delete_subscription(session: SessionDep, _admin: AdminDep, subscription_id: SubscriptionId) -> None:
    """Its deliveries stay in the log; pending ones are not sent."""
    service.unsubscribe(session, subscription_id)


@router.get("/deliveries", response_model=list[DeliveryRead])
def list_deliveries(session: SessionDep, _admin: AdminDep,
                    subscription: int | None = Query(None, ge=1, le=MAX_ID), status: DeliveryStatus | None = None,
                    limit: int = Query(100, ge=1, le=1000)) -> list[DeliveryRead]:
    """The delivery log, newest first: each event sent to each subscription, its attempts,
    the last response status and error."""
    rows = repository.deliveries(session, subscription_id=subscription, status=status, limit=limit)
    return [DeliveryRead(id=d.id, subscription_id=d.subscription_id, channel=d.channel.value, event=d.event.value,
                         status=d.status.value, attempts=d.attempts, response_status=d.response_status,
                         last_error=d.last_error, created_at=d.created_at, delivered_at=d.delivered_at,
                         payload=d.payload) for d in rows]
