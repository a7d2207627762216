"""The history of a repository bounded to about `width` points per series (a chart's width),
read as columns: the page's charts and /api/history?width=N. Only the kept points (and their
commits' metadata) become Python objects; the full resolution is one zoom away (`start`/`end`).

`read_history` reads a digest of the points and of the marks (columns.series_digest and
repository.marks_digest: on PostgreSQL without reading either), the ETag; `bounded_view` reads
them and builds the view: a request whose ETag matches is answered before anything is read or
built. Raises NotFound.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote, urlencode
from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from perfbisect.dashboards import columns, repository, views
from perfbisect.dashboards.downsample import keep_offsets
from perfbisect.dashboards.history import (
    CulpritRow,
    FailedTrialRow,
    RevisionPoint,
    Series,
    assemble_histories,
    failures_of,
    steps_of,
)
from perfbisect.dashboards.links import repo_links
from perfbisect.dashboards.payload import point_columns, rounded
from perfbisect.service.models import Repository

CHART_POINTS = 1400  # what the page's charts carry per series (about a wide chart's pixels)


@dataclass
class HistoryRead:
    repository: Repository
    keys: dict[int, tuple[str, str, str]]  # case id -> (suite, target, case) of every case read
    case_ids: list[int]  # the cases with a series in the window (and of the shape)
    window: tuple[int | None, int | None]  # first and last position
    shapes: dict[str, list[str]]
    # The same digest, the same points, steps and failed marks. Not covered: a point's commit's
    # subject or a device's description rewritten while no point of the case changes.
    digest: str


def read_history(session: Session, name: str, *, suite: str | None = None, target: str | None = None,
                 case: str | None = None, last: int | None = None, start: int | None = None,
                 end: int | None = None, shape: dict[str, str] | None = None) -> HistoryRead:
    """The matching cases with a series (optionally the `last` commits, or positions start..end;
    `shape` keeps the cases whose parameters match) and a digest of their points and of the
    culprits and failed trials that mark them (on PostgreSQL neither read: 5 statements)."""
    repo = views.find_repository(session, name)
    since = views.first_position(session, repo.id, last, start)
    keys = repository.case_keys(session, repo.id, suite=suite, target=target, case=case)
    case_ids, digest = columns.series_digest(session, sorted(keys), since, end)
    shapes = views.shapes_of({keys[c][2] for c in case_ids})
    if shape:
        case_ids = [c for c in case_ids if views.shape_matches(keys[c][2], shape)]
    stamp = hashlib.blake2b(digest.encode(), digest_size=16)
    stamp.update(repr((repo.id, repo.name, repo.url, sorted(shape.items()) if shape else None, case_ids,
                       repository.marks_digest(session, repo.id))).encode())
    return HistoryRead(repository=repo, keys=keys, case_ids=case_ids, window=(since, end), shapes=shapes,
                       digest=stamp.hexdigest())


def _marks(session: Session, read: HistoryRead) -> tuple[list[CulpritRow], list[FailedTrialRow], dict[str, int]]:
    """The culprits and failed trials of the repository, and the positions of their commits
    inside the window."""
    culprits = repository.culprit_rows(session, read.repository.id)
    failed = repository.failed_trials(session, read.repository.id)
    marked_shas = sorted({sha for c in culprits for sha in (c.first_sha, c.last_sha)} | {f.sha for f in failed})
    since, end = read.window
    low, high = (float("-inf") if since is None else since), (float("inf") if end is None else end)
    marked = {sha: p for sha, p in repository.revision_positions(session, read.repository.id, marked_shas).items()
              if low <= p <= high}
    return culprits, failed, marked


def _points(s: columns.SeriesColumns, kept: np.ndarray, sha_of: dict[int, str]) -> tuple[RevisionPoint, ...]:
    """RevisionPoints of the kept offsets only, rounded as the API's columns are (NaN read back
    as None): the page embeds them, and 17 digits of a 1e-3 noise were a tenth of it."""
    ints = [s.ints[c][kept].tolist() for c in columns.INTS]
    floats = {c: rounded(s.floats[c][kept]) for c in columns.FLOATS}
    return tuple(RevisionPoint(sha_of[rid], position, *values)
                 for position, rid, values in zip(ints[0], ints[1], zip(
                     floats["value"], floats["control_value"], floats["ratio"], ints[2], floats["value_min"],
                     floats["value_max"], floats["ratio_min"], floats["ratio_max"])))


def bounded_view(session: Session, read: HistoryRead, width: int, *, panels: bool = False,
                 overlay: bool = False) -> views.RepositoryHistory:
    """The view of `read` with at most about `width` points per series: every step edge and
    failed commit kept, and each bucket's extremes (dashboards.downsample). With `panels` (the
    page) the kept points are built for the charts; without (the API) each series carries them
    as JSON columns (dashboards.payload) and no point object is built."""
    culprits, failed, marked = _marks(session, read)
    steps, failures = steps_of(culprits, marked), failures_of(failed, marked)
    lines, _ = columns.read_series(session, read.case_ids, *read.window)
    lines.sort(key=lambda s: (read.keys[s.case_id], s.fingerprint or ""))
    kept = []
    for s in lines:
        _, target, case = read.keys[s.case_id]
        marks = {i for m in steps.get((target, case), []) for i in (m.first_index, m.last_index)}
        marks |= {f.index for f in failures.get((target, case), [])}
        kept.append(keep_offsets(s.ints["position"], s.floats, width, marks))
    ids = np.unique(np.concatenate([s.ints["revision_id"][k] for s, k in zip(lines, kept)] or [[]]))
    metas = columns.revisions_by_id(session, ids.astype(np.int64))
    sha_of = {rid: meta.sha for rid, meta in metas.items()}
    series: dict[tuple[str, str, str], list[Series]] = {}
    positions: dict[str, int] = {}
    for s, k in zip(lines, kept):
        line = Series(fingerprint=s.fingerprint, unit=s.unit, higher_is_better=s.higher_is_better, measured=len(s),
                      points=_points(s, k, sha_of) if panels else (),
                      columns=None if panels else point_columns(s.ints, s.floats, k))
        series.setdefault(read.keys[s.case_id], []).append(line)
        positions.update(zip(map(sha_of.__getitem__, s.ints["revision_id"][k].tolist()), s.ints["position"][k].tolist()))
    positions.update(marked)
    revisions = {meta.sha: meta for meta in metas.values()}
    if missing := sorted(positions.keys() - revisions.keys()):  # marks (culprits, failures) without a point
        revisions.update(repository.revision_meta(session, read.repository.id, missing))
    histories = assemble_histories(series, culprits, positions, failed)
    repo = read.repository
    links, devices = repo_links(repo.url, repo.name), views.device_names(session, histories)
    charts = views.chart_panels(histories, positions, revisions, links, devices, repo.name, overlay) if panels else []
    for panel in charts:
        panel.chart.update(zoom_source(repo.name, panel.histories, width))
    return views.RepositoryHistory(
        repository=repo, positions=positions, revisions=revisions, histories=histories, panels=charts,
        cases=repository.measured_cases(session, repo.id) if panels else [], links=links, devices=devices,
        shapes=read.shapes)


def zoom_source(name: str, histories: list, width: int) -> dict:
    """Where a chart of `histories` asks for a zoomed window at full resolution (static/charts.js
    adds start and end)."""
    query = {"suite": histories[0].suite, "target": histories[0].target, "width": width}
    if len(histories) == 1:
        query["case"] = histories[0].case
    return {"history_api": f"/api/history/{quote(name)}?{urlencode(query)}"}
