"""The bounded body of /api/history/{name}?width=N: per series the points that
dashboards.bounded kept (at most about N), in a compact column encoding. Pure: it reads an
assembled views.RepositoryHistory, no database.

Column encoding ("encoding": "columns"): `commits` and each series' `points` are objects of
equal-length arrays (commits: index, sha, subject, pr_number, authored_at; points: index, value,
control_value, ratio, trials and, when any is set, value_min, value_max, ratio_min, ratio_max);
a point's commit is the one of the same index. Floats are rounded to 6 significant digits (the
measurements' own noise is 1e-3 at best) and a column with no value at all is left out. One case
over 10,000 commits at width 1,400 is about 150 KB this way; as one dict per point with its sha,
about 3x that.
"""

from __future__ import annotations

from typing import Any

from perfbisect.dashboards.history import RevisionPoint

POINT_FIELDS = RevisionPoint._fields[1:]  # index, value, ... (the sha is the commit's)
FLOAT_FIELDS = frozenset(POINT_FIELDS) - {"index", "trials"}


def rounded(value: float | None) -> float | None:
    """6 significant digits: a shorter JSON number, the same chart."""
    return None if value is None else float(f"{value:.6g}")


def point_columns(points: list[RevisionPoint]) -> dict[str, list]:
    columns: dict[str, list] = {}
    for at, name in enumerate(POINT_FIELDS, start=1):
        column = [p[at] for p in points]
        if name in ("index", "value") or any(v is not None for v in column):
            columns[name] = [rounded(v) for v in column] if name in FLOAT_FIELDS else column
    return columns


def bounded_history_json(view: Any, width: int) -> dict[str, Any]:
    """The JSON body for `view` (a views.RepositoryHistory from dashboards.bounded, at most about
    `width` points per series); each series says how many points it has (`total`) and how many
    are sent (`sent`), so a chart can ask again for a narrower window."""
    cases, used = [], set()
    for h in view.histories:
        series = []
        for s in h.series:
            used.update(p.sha for p in s.points)
            series.append({"fingerprint": s.fingerprint, "unit": s.unit, "higher_is_better": s.higher_is_better,
                           "device": view.devices.get(s.fingerprint or ""), "total": s.total,
                           "sent": len(s.points), "points": point_columns(s.points)})
        used |= {sha for m in h.steps for sha in (m.first_sha, m.last_sha)} | {f.sha for f in h.failed}
        cases.append({"suite": h.suite, "target": h.target, "case": h.case, "units": h.units, "series": series,
                      "steps": [step_json(m) for m in h.steps],
                      "failed": [{"sha": f.sha, "index": f.index, "statuses": list(f.statuses)} for f in h.failed]})
    return {"repository": view.repository.name, "encoding": "columns", "width": width,
            "commits": commit_columns(view, used), "cases": cases}


def step_json(m) -> dict[str, Any]:
    return {"kind": m.kind, "first_sha": m.first_sha, "last_sha": m.last_sha, "exact": m.exact,
            "first_index": m.first_index, "last_index": m.last_index,
            "rel": m.rel, "ci": list(m.ci) if m.ci else None, "job_id": m.job_id,
            "pr_number": m.pr_number, "subject": m.subject}


def commit_columns(view: Any, shas: set[str]) -> dict[str, list]:
    ordered = sorted(shas, key=view.positions.__getitem__)
    metas = [view.revisions.get(sha) for sha in ordered]
    columns = {"index": [view.positions[sha] for sha in ordered], "sha": ordered,
               "subject": [m.subject if m else None for m in metas],
               "pr_number": [m.pr_number if m else None for m in metas],
               "authored_at": [m.authored_at.isoformat() if m and m.authored_at else None for m in metas]}
    return {k: v for k, v in columns.items() if k in ("index", "sha") or any(x is not None for x in v)}
