"""The notification tables (migration 0014_notifications). Kept beside their domain rather than
in service/models.py: nothing else joins them."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from perfbisect.service.models import Base, _enum, utcnow


class Event(str, enum.Enum):
    alert = "alert"  # a tracked branch raised a new alert
    culprit = "culprit"  # a bisect named its culprits (an alert's bisect included)
    gate_failure = "gate_failure"  # a pull request's compare job failed its merge gate


class Channel(str, enum.Enum):
    webhook = "webhook"  # JSON POST, signed with HMAC-SHA256 of the body
    slack = "slack"  # a Slack-compatible incoming webhook: {"text": ...}
    email = "email"  # SMTP (PERFBISECT_SMTP_*)


class DeliveryStatus(str, enum.Enum):
    pending = "pending"  # queued or waiting for its next retry
    delivered = "delivered"
    failed = "failed"  # gave up after the last attempt (or the target refused it for good)


class Subscription(Base):
    __tablename__ = "notification_subscriptions"

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), index=True)
    branch: Mapped[str | None] = mapped_column(String(200), doc="None: every branch and every job of the repository")
    events: Mapped[list[Any]] = mapped_column(doc="Event values")
    channel: Mapped[Channel] = mapped_column(_enum(Channel))
    target: Mapped[str] = mapped_column(String(2000), doc="a URL, or an email address")
    secret: Mapped[str | None] = mapped_column(String(200), doc="webhook: the HMAC key (shown once, at creation)")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by_token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))


class Delivery(Base):
    __tablename__ = "notification_deliveries"

    id: Mapped[int] = mapped_column(primary_key=True)
    subscription_id: Mapped[int | None] = mapped_column(
        ForeignKey("notification_subscriptions.id", ondelete="SET NULL"), index=True)
    channel: Mapped[Channel] = mapped_column(_enum(Channel))
    event: Mapped[Event] = mapped_column(_enum(Event))
    payload: Mapped[dict[str, Any]]
    status: Mapped[DeliveryStatus] = mapped_column(_enum(DeliveryStatus), default=DeliveryStatus.pending, index=True)
    attempts: Mapped[int] = mapped_column(default=0)
    response_status: Mapped[int | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None]
