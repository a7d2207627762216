"""repositories.pr_policy: what the pull-request bot measures and how its merge gate reads an
undecided compare ({"inconclusive": "neutral"|"failure", "failed": "neutral"|"failure",
"benchmark_set": name, "kernel_paths": {glob: [suite or case name, ...]}})

Revision ID: 0011_gate
Revises: 0007_samples_retention
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011_gate"
down_revision = "0007_samples_retention"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("pr_policy", JSON, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("pr_policy")
