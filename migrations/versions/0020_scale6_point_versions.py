"""case_points.version: a number from a sequence, new on every insert and update of a point (a
trigger), and covered by the history index. The bounded history's ETag is then the count, sum
and maximum of a case's versions, one index-only aggregate instead of reading every point: a
rewritten point has a new, larger version (the sum moves even when a transaction that drew a
smaller number commits last), a deleted one lowers the count. PostgreSQL only (the trigger and
the sequence); elsewhere the column stays 0 and the history digests the points it reads.

Revision ID: 0017_scale6
Revises: 0016_sbs_side_by_side
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_scale6"
down_revision = "0016_sbs_side_by_side"
branch_labels = None
depends_on = None

INDEX = "ix_case_points_case_position"
COVERED = ["fingerprint", "revision_id", "trials", "value", "control_value", "ratio", "unit", "higher_is_better",
           "value_min", "value_max", "ratio_min", "ratio_max"]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        with op.batch_alter_table("case_points") as batch:
            batch.add_column(sa.Column("version", sa.BigInteger, nullable=False, server_default="0"))
        return
    op.execute("CREATE SEQUENCE case_points_version_seq")
    op.add_column("case_points", sa.Column("version", sa.BigInteger, nullable=False,
                                           server_default=sa.text("nextval('case_points_version_seq')")))
    op.execute("""
        CREATE FUNCTION case_points_new_version() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.version := nextval('case_points_version_seq');
            RETURN NEW;
        END $$""")
    op.execute("CREATE TRIGGER case_points_version BEFORE UPDATE ON case_points "
               "FOR EACH ROW EXECUTE FUNCTION case_points_new_version()")
    op.drop_index(INDEX, table_name="case_points")
    op.create_index(INDEX, "case_points", ["case_id", "position"], postgresql_include=COVERED + ["version"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index(INDEX, table_name="case_points")
        op.create_index(INDEX, "case_points", ["case_id", "position"], postgresql_include=COVERED)
        op.execute("DROP TRIGGER case_points_version ON case_points")
        op.execute("DROP FUNCTION case_points_new_version()")
    with op.batch_alter_table("case_points") as batch:
        batch.drop_column("version")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP SEQUENCE case_points_version_seq")
