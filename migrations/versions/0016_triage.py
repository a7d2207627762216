"""Triage in the dashboard (issue 27): an alert keeps who triaged it last, its assignee and its
issue link (PATCH /api/alerts took them and dropped them), and every change a person makes is
kept in alert_changes (who, when, which field, old and new value). The new status
'investigating' needs no change: alert statuses are a VARCHAR(20) without a CHECK.

Revision ID: 0015_triage
Revises: 0012_attribution
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_triage"
down_revision = "0012_attribution"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(sa.Column("assignee", sa.String(100), nullable=True))
        batch.add_column(sa.Column("bug", sa.String(500), nullable=True))
        batch.add_column(sa.Column("triaged_by", sa.String(100), nullable=True))
    op.create_table(
        "alert_changes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("alert_id", sa.Integer, sa.ForeignKey("alerts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("by", sa.String(100), nullable=False),
        sa.Column("field", sa.String(20), nullable=False),
        sa.Column("old", sa.Text, nullable=True),
        sa.Column("new", sa.Text, nullable=True),
    )
    op.create_index("ix_alert_changes_alert_id", "alert_changes", ["alert_id"])


def downgrade() -> None:
    op.drop_index("ix_alert_changes_alert_id", table_name="alert_changes")
    op.drop_table("alert_changes")
    with op.batch_alter_table("alerts") as batch:
        batch.drop_column("triaged_by")
        batch.drop_column("bug")
        batch.drop_column("assignee")
