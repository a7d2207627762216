"""resilience: trials remember when their message was sent and when their worker last beat

Revision ID: 0002_resilience
Revises: 0002_dashboard
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_resilience"
down_revision = "0002_dashboard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    # The reconciler scans in-flight trials by status and age.
    op.create_index("ix_trials_status_dispatched_at", "trials", ["status", "dispatched_at"])


def downgrade() -> None:
    op.drop_index("ix_trials_status_dispatched_at", table_name="trials")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("dispatched_at")
