"""Side-by-side blocks (issue 23): a trial measured in a block has the block's id (unique within
its job) and its slot in the block's A B B A order (0..3). The four trials of a block run in
that order on one worker; `observations_from` hands the block ids to the planner, which
confirms a culprit on the within-block differences only. NULL: an unpaired trial.

Revision ID: 0016_sbs_side_by_side
Revises: 0016_track_confirm
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_sbs_side_by_side"
down_revision = "0016_track_confirm"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("block", sa.Integer, nullable=True))
        batch.add_column(sa.Column("block_slot", sa.Integer, nullable=True))
    op.create_index("ix_trials_job_id_block", "trials", ["job_id", "block"])


def downgrade() -> None:
    op.drop_index("ix_trials_job_id_block", table_name="trials")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("block_slot")
        batch.drop_column("block")
