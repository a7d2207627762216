"""tracked_branches.confirm_trials defaults to 3: a new tracked branch re-measures a suspected
performance step side by side (3 trials of each of its two heads) before it alerts.
bench/track_staircase.py: on a half-loaded machine that took false alerts from 4 to 0 in 200
histories and missed steps from 270 to 51 of 800, for 6 trials per suspected step; quiet, it
changes nothing but that cost (bench/RESULTS.md, eleventh session). Branches already tracked keep
their value.

Revision ID: 0018_track2
Revises: 0017_scale6
"""

from __future__ import annotations

from alembic import op

revision = "0018_track2"
down_revision = "0017_scale6"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tracked_branches") as batch:
        batch.alter_column("confirm_trials", server_default="3")


def downgrade() -> None:
    with op.batch_alter_table("tracked_branches") as batch:
        batch.alter_column("confirm_trials", server_default="0")
