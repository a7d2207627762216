"""repositories.dependencies: the dependencies a repository pins (issue 44): per dependency its
name, the registered repository holding its history, where the pin lives (a submodule gitlink,
a JSON key, a `name==version` line, a `REV = "..."` line), where its tree is placed in a
revision's worktree, and the recipe that installs it. A culprit that moves a pin is bisected
again inside the dependency.

Revision ID: 0026_repo_dependencies
Revises: 0025_culprit_evidence
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0026_repo_dependencies"
down_revision = "0025_culprit_evidence"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("dependencies", JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("dependencies")
