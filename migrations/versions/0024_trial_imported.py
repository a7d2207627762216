"""trials.imported: the worktree files a trial loaded (issue 43: hunk localization splits only
the hunks of those files).

Revision ID: 0024_trial_imported
Revises: 0023_triage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0024_trial_imported"
down_revision = "0023_triage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("imported", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()),
                                                                       "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("imported")
