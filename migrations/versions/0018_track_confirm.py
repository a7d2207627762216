"""tracked_branches.confirm_trials: before a performance step becomes an alert, re-measure its
two heads side by side with this many trials each (0: alert at once, as before)

Revision ID: 0016_track_confirm
Revises: 0014_notifications
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_track_confirm"
down_revision = "0014_notifications"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tracked_branches") as batch:
        batch.add_column(sa.Column("confirm_trials", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("tracked_branches") as batch:
        batch.drop_column("confirm_trials")
