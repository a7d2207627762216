"""trials (fingerprint, id) instead of (fingerprint): the newest trial of a fingerprint (the
device and toolchain a history shows) is a backward index probe that stops at the first row,
where max(id) per fingerprint read every trial of the fingerprint (30,000 for a year of one
case on the scale bench, growing with the history). A trial without a device stored a JSON
null as its provenance, which IS NOT NULL: it becomes SQL NULL, as the service now writes it.

Revision ID: 0006_trials_fingerprint_id
Revises: 0005_history_index
"""

from __future__ import annotations

from alembic import op

revision = "0006_trials_fingerprint_id"
down_revision = "0005_history_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_null = "'null'::jsonb" if op.get_bind().dialect.name == "postgresql" else "'null'"
    op.execute(f"UPDATE trials SET provenance = NULL WHERE provenance = {json_null}")
    op.create_index("ix_trials_fingerprint_id", "trials", ["fingerprint", "id"])
    op.drop_index("ix_trials_fingerprint", table_name="trials")


def downgrade() -> None:
    op.create_index("ix_trials_fingerprint", "trials", ["fingerprint"])
    op.drop_index("ix_trials_fingerprint_id", table_name="trials")
