"""security: API tokens, job submitters, request de-duplication, idempotency keys, webhook deliveries

Revision ID: 0002_security
Revises: 0002_gpu
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_security"
down_revision = "0002_gpu"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
OPEN_JOB = sa.text("status IN ('queued', 'running')")


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("scopes", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("submitter_token_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("request_hash", sa.String(length=64), nullable=True))
        batch_op.create_foreign_key("fk_jobs_submitter_token_id_api_tokens", "api_tokens",
                                    ["submitter_token_id"], ["id"], ondelete="SET NULL")
        batch_op.create_index(batch_op.f("ix_jobs_submitter_token_id"), ["submitter_token_id"], unique=False)
    op.create_index("uq_jobs_open_request_hash", "jobs", ["request_hash"], unique=True,
                    postgresql_where=OPEN_JOB, sqlite_where=OPEN_JOB)
    op.create_table(
        "idempotency_keys",
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_id", "key"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(length=100), nullable=False),
        sa.Column("body_sha256", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=100), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("delivery_id"),
        sa.UniqueConstraint("body_sha256"),
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("idempotency_keys")
    op.drop_index("uq_jobs_open_request_hash", table_name="jobs")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_submitter_token_id"))
        batch_op.drop_constraint("fk_jobs_submitter_token_id_api_tokens", type_="foreignkey")
        batch_op.drop_column("request_hash")
        batch_op.drop_column("submitter_token_id")
    op.drop_table("api_tokens")
