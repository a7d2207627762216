"""trials.phases: where each trial's wall time went (checkout, build, start, import, compile,
inputs and reference, timing, teardown)

Revision ID: 0002_gpu
Revises: 0002_scale
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_gpu"
down_revision = "0002_scale"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("trials", sa.Column(
        "phases", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True))


def downgrade() -> None:
    op.drop_column("trials", "phases")
