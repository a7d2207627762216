"""trials.accuracy_only: a correctness-sweep trial (accuracy check only, no timing loop)

Revision ID: 0002_outcomes
Revises: 0002_loop
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_outcomes"
down_revision = "0002_loop"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch_op:
        batch_op.add_column(sa.Column("accuracy_only", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch_op:
        batch_op.drop_column("accuracy_only")
