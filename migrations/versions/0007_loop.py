"""tracked branches and alerts (the automatic loop)

Revision ID: 0002_loop
Revises: 0002_resilience
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_loop"
down_revision = "0002_resilience"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, length=20)


def upgrade() -> None:
    op.create_table(
        "tracked_branches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("branch", sa.String(length=200), nullable=False),
        sa.Column("device_class", sa.String(length=50), nullable=False),
        sa.Column("cases", JSON, nullable=False),
        sa.Column("metric", sa.String(length=10), nullable=False),
        sa.Column("policy", JSON, nullable=True),
        sa.Column("trigger", _enum("tracktrigger", "push", "schedule", "poll"), nullable=False),
        sa.Column("interval_s", sa.Integer(), nullable=False),
        sa.Column("backfill_every", sa.Integer(), nullable=False),
        sa.Column("backfill_depth", sa.Integer(), nullable=False),
        sa.Column("trials_per_head", sa.Integer(), nullable=False),
        sa.Column("min_magnitude", sa.Float(), nullable=False),
        sa.Column("max_bisects", sa.Integer(), nullable=False),
        sa.Column("last_sha", sa.String(length=64), nullable=True),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("repository_id", "branch", "device_class"),
    )
    with op.batch_alter_table("tracked_branches", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tracked_branches_repository_id"), ["repository_id"], unique=False)

    kinds = ("regression", "improvement", "wrong_results")
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tracked_branch_id", sa.Integer(), nullable=False),
        sa.Column("kind", _enum("alertkind", *kinds), nullable=False),
        sa.Column("status", _enum("alertstatus", "new", "acknowledged", "invalid", "fixed", "expected"),
                  nullable=False),
        sa.Column("before_sha", sa.String(length=64), nullable=False),
        sa.Column("first_sha", sa.String(length=64), nullable=False),
        sa.Column("last_sha", sa.String(length=64), nullable=False),
        sa.Column("magnitude", sa.Float(), nullable=False),
        sa.Column("culprit_first_sha", sa.String(length=64), nullable=True),
        sa.Column("culprit_last_sha", sa.String(length=64), nullable=True),
        sa.Column("culprit_pr", sa.Integer(), nullable=True),
        sa.Column("bisect_job_id", sa.Integer(), nullable=True),
        sa.Column("fixed_by_id", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("comments", JSON, nullable=False),
        sa.Column("detections", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("triaged_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["tracked_branch_id"], ["tracked_branches.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["bisect_job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["fixed_by_id"], ["alerts.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alerts_tracked_branch_id"), ["tracked_branch_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_status"), ["status"], unique=False)

    op.create_table(
        "alert_cases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("kind", _enum("alertkind", *kinds), nullable=False),
        sa.Column("rel", sa.Float(), nullable=True),
        sa.Column("pvalue", sa.Float(), nullable=True),
        sa.Column("mean_before", sa.Float(), nullable=True),
        sa.Column("mean_after", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["alert_id"], ["alerts.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("alert_id", "case_id"),
    )
    with op.batch_alter_table("alert_cases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_cases_alert_id"), ["alert_id"], unique=False)


def downgrade() -> None:
    op.drop_table("alert_cases")
    op.drop_table("alerts")
    op.drop_table("tracked_branches")
