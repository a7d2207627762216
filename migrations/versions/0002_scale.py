"""scale: raw samples out of the hot table, first-parent positions, per-revision case points

- `measurement_samples` holds each measurement's raw samples (fetched only when asked for); the
  `measurements` row keeps the summary values.
- `revisions.position` is the commit's first-parent depth on its branch (0 = the root), so a
  history is ordered, and its last N commits selected, in SQL.
- `case_points` is the per (case, revision, fingerprint) median over the ok trials: a case's
  history is an index range scan over (case_id, position).

Revision ID: 0002_scale
Revises: 0001
"""

from __future__ import annotations

import heapq
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_scale"
down_revision = "0001"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "measurement_samples",
        sa.Column("measurement_id", sa.Integer(), nullable=False),
        sa.Column("samples", JSONType, nullable=False),
        sa.ForeignKeyConstraint(["measurement_id"], ["measurements.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("measurement_id"),
    )
    op.execute("INSERT INTO measurement_samples (measurement_id, samples) SELECT id, samples FROM measurements")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("samples")

    with op.batch_alter_table("revisions") as batch:
        batch.add_column(sa.Column("position", sa.Integer(), nullable=True))
        batch.create_index("ix_revisions_repository_position", ["repository_id", "position"])

    op.create_table(
        "case_points",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("revision_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=True),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("control_value", sa.Float(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(length=20), nullable=True),
        sa.Column("higher_is_better", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["revision_id"], ["revisions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("case_id", "revision_id", "fingerprint"),
    )
    op.create_index("ix_case_points_case_position", "case_points", ["case_id", "position"])
    op.create_index("ix_case_points_revision_id", "case_points", ["revision_id"])
    _backfill()


def _backfill() -> None:
    """Positions from the jobs' first-parent ranges, and case points from the stored trials."""
    conn = op.get_bind()
    ranges: dict[int, list[list[str]]] = defaultdict(list)
    for repo_id, kind, shas in conn.execute(sa.text("SELECT repository_id, kind, revision_shas FROM jobs ORDER BY id")):
        if isinstance(shas, str):
            shas = json.loads(shas)
        ranges[repo_id].append(list(shas) if kind != "compare" else list(shas)[:1])
    for repo_id, seqs in ranges.items():
        for position, sha in enumerate(_merge_commit_orders(seqs)):
            conn.execute(sa.text("UPDATE revisions SET position = :p WHERE repository_id = :r AND sha = :s"),
                         {"p": position, "r": repo_id, "s": sha})
    groups: dict[tuple, list] = defaultdict(list)
    rows = conn.execute(sa.text(
        "SELECT m.case_id, t.revision_id, COALESCE(t.fingerprint, ''), m.value, m.control_value, m.ratio, m.unit, "
        "m.higher_is_better, r.position FROM measurements m JOIN trials t ON t.id = m.trial_id "
        "JOIN revisions r ON r.id = t.revision_id WHERE t.status = 'ok' AND m.status = 'ok' AND m.value IS NOT NULL"))
    for case_id, revision_id, fingerprint, *rest in rows:
        groups[(case_id, revision_id, fingerprint)].append(rest)
    for (case_id, revision_id, fingerprint), members in groups.items():
        conn.execute(sa.text(
            "INSERT INTO case_points (case_id, revision_id, fingerprint, position, trials, value, control_value, "
            "ratio, unit, higher_is_better) VALUES (:c, :r, :f, :p, :n, :v, :cv, :ratio, :u, :h)"),
            {"c": case_id, "r": revision_id, "f": fingerprint, "p": members[0][5], "n": len(members),
             "v": _median(m[0] for m in members), "cv": _median(m[1] for m in members),
             "ratio": _median(m[2] for m in members), "u": members[0][3], "h": bool(members[0][4])})


def _merge_commit_orders(sequences: Iterable[Sequence[str]]) -> list[str]:
    """One commit order from several first-parent ranges (each oldest first): every range's order
    is kept; commits the ranges do not order against each other are placed by when they were
    first seen, and a cycle (ranges that disagree, e.g. after a force push) is broken by the same
    rule. A frozen copy of dashboards/history.py's merge_commit_orders as it was when this
    migration was written (without authored dates, which this backfill never had): a migration
    must not change when the application's code does."""
    seen: dict[str, int] = {}
    after: dict[str, set[str]] = defaultdict(set)
    for seq in sequences:
        for sha in seq:
            seen.setdefault(sha, len(seen))
        for a, b in zip(seq, seq[1:]):
            if a != b:
                after[a].add(b)
    indegree = {sha: 0 for sha in seen}
    for successors in after.values():
        for b in successors:
            indegree[b] += 1
    heap = [(seen[sha], sha) for sha, d in indegree.items() if d == 0]
    heapq.heapify(heap)
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(seen):
        if not heap:  # a cycle: release the earliest remaining commit
            heap = [min((seen[sha], sha) for sha in seen if sha not in placed)]
        sha = heapq.heappop(heap)[-1]
        if sha in placed:
            continue
        placed.add(sha)
        order.append(sha)
        for nxt in after.get(sha, ()):
            indegree[nxt] -= 1
            if indegree[nxt] == 0 and nxt not in placed:
                heapq.heappush(heap, (seen[nxt], nxt))
    return order


def _median(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def downgrade() -> None:
    op.drop_index("ix_case_points_revision_id", table_name="case_points")
    op.drop_index("ix_case_points_case_position", table_name="case_points")
    op.drop_table("case_points")
    with op.batch_alter_table("revisions") as batch:
        batch.drop_index("ix_revisions_repository_position")
        batch.drop_column("position")
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("samples", JSONType, nullable=False, server_default="{}"))
    op.execute("UPDATE measurements SET samples = (SELECT s.samples FROM measurement_samples s "
               "WHERE s.measurement_id = measurements.id) WHERE id IN (SELECT measurement_id FROM measurement_samples)")
    op.drop_table("measurement_samples")
