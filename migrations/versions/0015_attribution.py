"""trials of an attribution job name their variant: the bad end with some culprits reverted
('0+1': culprits 0 and 1 of the job's spec, reverted together). NULL is the commit as it is;
a variant's measurements never enter a history (case_points, tracking, dashboards).

Revision ID: 0012_attribution
Revises: 0011_gate
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_attribution"
down_revision = "0011_gate"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("variant", sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("variant")
