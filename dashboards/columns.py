"""A case's stored per-revision medians read as columns (numpy arrays), never as one Python
object per point: what the bounded history (dashboards.bounded) downsamples. SQL only.

On PostgreSQL one row per series: array_agg over the index range scan of case_points (case_id,
position), fetched in the binary protocol and read with numpy.frombuffer, so no float or tuple
object is built per value; a missing float is NaN. The arrays are aggregated without ORDER BY
and put in position order by numpy when they are not (PostgreSQL 15 sorts each ordered
aggregate on its own: ten sorts of the same rows). Elsewhere (SQLite, the embedded default)
the same rows, turned into the same arrays.

`series_digest` answers whether anything read_series would read changed without reading it: on
PostgreSQL each series' count, sum and maximum of its points' versions (a sequence number new on
every write, migration 0017), one index-only aggregate; elsewhere a digest of the read itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg.adapt import Loader
from sqlalchemy import select
from sqlalchemy.orm import Session

from perfbisect.dashboards.repository import RevisionMeta
from perfbisect.service.models import CasePoint, Revision

FLOATS = ("value", "control_value", "ratio", "value_min", "value_max", "ratio_min", "ratio_max")
INTS = ("position", "revision_id", "trials")


@dataclass
class SeriesColumns:
    """One fingerprint's line of one case: equal-length arrays in position order."""

    case_id: int
    fingerprint: str | None
    unit: str | None
    higher_is_better: bool
    ints: dict[str, np.ndarray]  # INTS, int64
    floats: dict[str, np.ndarray]  # FLOATS, float64, NaN where missing

    def __len__(self) -> int:
        return len(self.ints["position"])


class _RawArray(Loader):
    """A binary array kept as its bytes (numpy reads them)."""

    format = psycopg.pq.Format.BINARY

    def load(self, data) -> bytes:
        return bytes(data)


def _from_binary(data: bytes, kind: str) -> np.ndarray:
    """The values of a 1-dimensional PostgreSQL binary array without NULLs: a 20-byte header,
    then per element a 4-byte length and the big-endian value."""
    if int.from_bytes(data[:4], "big") == 0:  # an empty array has no dimension
        return np.empty(0, dtype=kind)
    if int.from_bytes(data[4:8], "big"):
        raise ValueError("an array with NULLs")  # the query coalesces every column
    return np.frombuffer(data, dtype=[("length", ">i4"), ("value", ">" + kind)], offset=20)["value"].astype(kind)


_PG_SERIES = """
SELECT case_id, nullif(fingerprint, ''), min(unit), bool_and(higher_is_better),
       {ints}, {floats}
FROM case_points
WHERE case_id = ANY(%(case_ids)s) AND position IS NOT NULL AND value IS NOT NULL
  AND position >= %(low)s AND position <= %(high)s
GROUP BY case_id, fingerprint
ORDER BY case_id, fingerprint
""".format(ints=", ".join(f"array_agg({c}::int8)" for c in INTS),
           floats=", ".join(f"array_agg(coalesce({c}::float8, 'NaN'))" for c in FLOATS))
_PG_VERSIONS = """
SELECT case_id, fingerprint, count(*), sum(version), max(version)
FROM case_points
WHERE case_id = ANY(%(case_ids)s) AND position IS NOT NULL AND value IS NOT NULL
  AND position >= %(low)s AND position <= %(high)s
GROUP BY case_id, fingerprint
ORDER BY case_id, fingerprint
"""
ALL = (-(2 ** 31), 2 ** 31 - 1)


def _bounds(min_position: int | None, max_position: int | None) -> tuple[int, int]:
    return (ALL[0] if min_position is None else min_position), (ALL[1] if max_position is None else max_position)


def read_series(session: Session, case_ids: Sequence[int], min_position: int | None = None,
                max_position: int | None = None) -> tuple[list[SeriesColumns], str]:
    """The series of the cases `case_ids` (optionally only positions min..max), ordered by case
    and fingerprint, and a digest of everything read."""
    low, high = _bounds(min_position, max_position)
    if session.get_bind().dialect.name == "postgresql":
        return _read_postgresql(session, list(case_ids), low, high)
    return _read_rows(session, list(case_ids), low, high)


def series_digest(session: Session, case_ids: Sequence[int], min_position: int | None = None,
                  max_position: int | None = None) -> tuple[list[int], str]:
    """The cases of `case_ids` that have a series in the window (ascending) and a digest that
    changes whenever anything read_series would read changes: a point written (a new version:
    the sum moves even when a transaction that drew a smaller one commits last), added or
    deleted (the count). On PostgreSQL without reading the points; elsewhere by reading them."""
    low, high = _bounds(min_position, max_position)
    if session.get_bind().dialect.name != "postgresql":
        series, digest = _read_rows(session, list(case_ids), low, high)
        return sorted({s.case_id for s in series}), digest
    with session.connection().connection.driver_connection.cursor() as cursor:
        rows = cursor.execute(_PG_VERSIONS, {"case_ids": list(case_ids), "low": low, "high": high}).fetchall()
    return sorted({r[0] for r in rows}), hashlib.blake2b(repr((low, high, rows)).encode(), digest_size=16).hexdigest()


def _read_postgresql(session: Session, case_ids: list[int], low: int, high: int) -> tuple[list[SeriesColumns], str]:
    driver = session.connection().connection.driver_connection
    digest = hashlib.blake2b(digest_size=16)
    series = []
    with driver.cursor(binary=True) as cursor:
        for kind in ("int8", "float8"):
            cursor.adapters.register_loader(driver.adapters.types[kind].array_oid, _RawArray)
        cursor.execute(_PG_SERIES, {"case_ids": case_ids, "low": low, "high": high})
        for case_id, fingerprint, unit, higher, *arrays in cursor:
            digest.update(repr((case_id, fingerprint, unit, higher)).encode())
            for data in arrays:
                digest.update(data)
            ints = {c: _from_binary(a, "i8") for c, a in zip(INTS, arrays)}
            floats = {c: _from_binary(a, "f8") for c, a in zip(FLOATS, arrays[len(INTS):])}
            if np.any(np.diff(ints["position"]) < 0):  # aggregated in scan order: sorted here, not in 10 sorts
                order = np.argsort(ints["position"], kind="stable")
                ints = {c: a[order] for c, a in ints.items()}
                floats = {c: a[order] for c, a in floats.items()}
            series.append(SeriesColumns(case_id=case_id, fingerprint=fingerprint, unit=unit, higher_is_better=higher,
                                        ints=ints, floats=floats))
    return series, digest.hexdigest()


def _read_rows(session: Session, case_ids: list[int], low: int, high: int) -> tuple[list[SeriesColumns], str]:
    columns = [getattr(CasePoint, c) for c in INTS + FLOATS]
    stmt = (select(CasePoint.case_id, CasePoint.fingerprint, CasePoint.unit, CasePoint.higher_is_better, *columns)
            .where(CasePoint.case_id.in_(case_ids), CasePoint.position.is_not(None), CasePoint.value.is_not(None),
                   CasePoint.position.between(low, high))
            .order_by(CasePoint.case_id, CasePoint.fingerprint, CasePoint.position))
    groups: dict[tuple[int, str], list] = {}
    for row in session.connection().execute(stmt):
        groups.setdefault((row[0], row[1]), []).append(row)
    digest = hashlib.blake2b(digest_size=16)
    series = []
    for (case_id, fingerprint), rows in groups.items():
        ints = np.array([r[4:4 + len(INTS)] for r in rows], dtype=np.int64).reshape(-1, len(INTS))
        floats = np.array([r[4 + len(INTS):] for r in rows], dtype=np.float64).reshape(-1, len(FLOATS))
        digest.update(repr((case_id, fingerprint, rows[0][2], rows[0][3])).encode())
        digest.update(ints.tobytes() + floats.tobytes())
        series.append(SeriesColumns(
            case_id=case_id, fingerprint=fingerprint or None, unit=min((r[2] for r in rows if r[2]), default=None),
            higher_is_better=all(r[3] for r in rows),
            ints={c: ints[:, n].copy() for n, c in enumerate(INTS)},
            floats={c: floats[:, n].copy() for n, c in enumerate(FLOATS)}))
    return series, digest.hexdigest()


def revisions_by_id(session: Session, ids: Sequence[int]) -> dict[int, RevisionMeta]:
    """revision id -> sha, subject, PR, date of the commits `ids`: on PostgreSQL one array
    parameter (not thousands of bound values) read by the driver's cursor, like the points."""
    if not len(ids):
        return {}
    wanted = [int(i) for i in ids]
    if session.get_bind().dialect.name == "postgresql":
        with session.connection().connection.driver_connection.cursor(binary=True) as cursor:
            rows = cursor.execute("SELECT id, sha, subject, pr_number, authored_at FROM revisions WHERE id = ANY(%s)",
                                  (wanted,)).fetchall()
    else:
        stmt = select(Revision.id, Revision.sha, Revision.subject, Revision.pr_number, Revision.authored_at)
        rows = session.connection().execute(stmt.where(Revision.id.in_(wanted))).all()
    return {rid: RevisionMeta(sha, subject or "", pr, date) for rid, sha, subject, pr, date in rows}
