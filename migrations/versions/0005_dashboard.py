"""dashboard: the spread of each per-revision case point

`case_points` gains the smallest and largest value and ratio over the revision's ok trials, so
the history charts draw the trials' spread as a band around the median without reading the
measurements of a whole repository.

Revision ID: 0002_dashboard
Revises: 0002_security
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_dashboard"
down_revision = "0002_security"
branch_labels = None
depends_on = None

SPREAD = ("value_min", "value_max", "ratio_min", "ratio_max")


def upgrade() -> None:
    with op.batch_alter_table("case_points") as batch:
        for column in SPREAD:
            batch.add_column(sa.Column(column, sa.Float(), nullable=True))
    # Existing points: the same aggregate refresh_case_points keeps current from now on.
    op.execute("""
        UPDATE case_points SET value_min = s.value_min, value_max = s.value_max,
                               ratio_min = s.ratio_min, ratio_max = s.ratio_max
        FROM (SELECT m.case_id, t.revision_id, COALESCE(t.fingerprint, '') AS fingerprint,
                     MIN(m.value) AS value_min, MAX(m.value) AS value_max,
                     MIN(m.ratio) AS ratio_min, MAX(m.ratio) AS ratio_max
              FROM measurements m JOIN trials t ON m.trial_id = t.id
              WHERE t.status = 'ok' AND m.status = 'ok' AND m.value IS NOT NULL
              GROUP BY m.case_id, t.revision_id, COALESCE(t.fingerprint, '')) AS s
        WHERE case_points.case_id = s.case_id AND case_points.revision_id = s.revision_id
          AND case_points.fingerprint = s.fingerprint
    """)


def downgrade() -> None:
    with op.batch_alter_table("case_points") as batch:
        for column in reversed(SPREAD):
            batch.drop_column(column)
