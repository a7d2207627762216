"""Subscriptions and deliveries as the API takes and shows them."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from perfbisect.service.bounds import text

EventName = Literal["alert", "culprit", "gate_failure"]
ChannelName = Literal["webhook", "slack", "email"]
EMAIL = r"^[^@\s\x00]+@[^@\s\x00]+$"
URL = r"^https?://[^\s\x00]+$"


class SubscriptionCreate(BaseModel):
    repository: text(100, min_length=1) = Field(description="a registered repository's name")
    branch: text(200, min_length=1) | None = Field(
        default=None, description="only events of this branch (alerts and their bisects); None: every event "
        "of the repository, bisects and pull-request gates included")
    events: list[EventName] = Field(min_length=1, max_length=3, description="alert, culprit, gate_failure")
    channel: ChannelName
    target: text(2000, min_length=3) = Field(description="webhook and slack: an http(s) URL; email: an address")
    secret: text(200, min_length=16) | None = Field(
        default=None, description="webhook: the HMAC-SHA256 key; omitted: one is generated and shown once")

    @model_validator(mode="after")
    def _target_fits_channel(self) -> SubscriptionCreate:
        pattern, what = (EMAIL, "an email address") if self.channel == "email" else (URL, "an http(s) URL")
        if not re.match(pattern, self.target):
            raise ValueError(f"a {self.channel} subscription's target must be {what}")
        if self.secret is not None and self.channel != "webhook":
            raise ValueError("only webhook subscriptions are signed: leave out the secret")
        self.events = list(dict.fromkeys(self.events))
        return self


class SubscriptionRead(BaseModel):
    id: int
    repository: str
    branch: str | None
    events: list[str]
    channel: str
    target: str
    created_at: datetime
    secret: str | None = Field(default=None, description="only in the answer to the creation")


class DeliveryRead(BaseModel):
    id: int
    subscription_id: int | None
    channel: str
    event: str
    status: str = Field(description="pending (queued or waiting to retry), delivered, failed (gave up)")
    attempts: int
    response_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    payload: dict[str, Any]
