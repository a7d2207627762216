"""Notifications (issue 27): subscriptions of a repository (or one of its branches) to alerts,
culprits and gate failures, delivered to a signed webhook, a Slack-compatible incoming webhook
or an email address; and the delivery log (one row per event and subscription, with its
attempts and last error).

Revision ID: 0014_notifications
Revises: 0015_triage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0014_notifications"
down_revision = "0015_triage"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "notification_subscriptions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("repository_id", sa.Integer, sa.ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("branch", sa.String(200), nullable=True),
        sa.Column("events", JSON, nullable=False),
        sa.Column("channel", sa.String(20), nullable=False),
        sa.Column("target", sa.String(2000), nullable=False),
        sa.Column("secret", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by_token_id", sa.Integer, sa.ForeignKey("api_tokens.id", ondelete="SET NULL"),
                  nullable=True),
    )
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("subscription_id", sa.Integer,
                  sa.ForeignKey("notification_subscriptions.id", ondelete="SET NULL"), nullable=True, index=True),
        sa.Column("channel", sa.String(20), nullable=False),
        sa.Column("event", sa.String(20), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("status", sa.String(20), nullable=False, index=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("response_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("notification_deliveries")
    op.drop_table("notification_subscriptions")
