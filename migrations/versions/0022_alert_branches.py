"""One alert per change (issue 42, M1): a second tracked branch that reaches a culprit already
alerted on attaches to that alert (alert_branches: the branch and its range around the step)
instead of raising, notifying and commenting again. The new alert kind 'broken' (a tracked head
that fails to build or import) needs no change: alert kinds are a VARCHAR(20) without a CHECK.

Revision ID: 0022_alert_branches
Revises: 0018_track2
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_alert_branches"
down_revision = "0018_track2"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_branches",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("alert_id", sa.Integer, sa.ForeignKey("alerts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("tracked_branch_id", sa.Integer, sa.ForeignKey("tracked_branches.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("before_sha", sa.String(64), nullable=False),
        sa.Column("last_sha", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("alert_id", "tracked_branch_id"),
    )
    op.create_index("ix_alert_branches_tracked_branch_id", "alert_branches", ["tracked_branch_id"])


def downgrade() -> None:
    op.drop_index("ix_alert_branches_tracked_branch_id", table_name="alert_branches")
    op.drop_table("alert_branches")
