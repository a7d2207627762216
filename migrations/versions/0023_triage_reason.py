"""alert_changes.reason: why a person changed an alert (issue 40: triage needs a scope, and a bulk
change is recorded on every alert it touched with who and why).

Revision ID: 0023_triage
Revises: 0022_alert_branches
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_triage"
down_revision = "0022_alert_branches"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alert_changes") as batch:
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alert_changes") as batch:
        batch.drop_column("reason")
