"""trials remember when their raw samples were deleted past the retention
(service/trials/retention.py): a pruning run then reads only trials not pruned yet, instead of
probing every old trial's measurements again each time, and a reader can tell pruned samples
from samples never stored.

Revision ID: 0007_samples_retention
Revises: 0006_trials_fingerprint_id
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_samples_retention"
down_revision = "0006_trials_fingerprint_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("samples_pruned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("samples_pruned_at")
