"""repositories.build_inputs (paths and globs a build depends on: the build cache's key) and
trials.build_cache (what the build cache did for the trial)

Revision ID: 0004_build_inputs
Revises: 0003_suite_sources
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004_build_inputs"
down_revision = "0003_suite_sources"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("build_inputs", JSON, nullable=False, server_default="[]"))
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("build_cache", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("build_cache")
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("build_inputs")
