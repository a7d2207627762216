"""trials.profile and trials.evidence: a culprit's profiled trials (issue 43). A profiled trial
runs one end of a culprit under torch.profiler and reads its Triton JIT cache; it stores what it
found in `evidence` and never a measurement, so it never enters the timing statistics.

Revision ID: 0025_culprit_evidence
Revises: 0024_trial_imported
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0025_culprit_evidence"
down_revision = "0024_trial_imported"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("profile", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("evidence", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("evidence")
        batch.drop_column("profile")
