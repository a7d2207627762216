"""The bounded body of /api/history/{name}?width=N: per series the points that
dashboards.bounded kept (at most about N), in a compact column encoding, straight from the
columns read (numpy), with no object per point. Pure, no database.

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

import numpy as np

# The points' columns in the body, in RevisionPoint's order after the sha.
POINT_FIELDS = ("index", "value", "control_value", "ratio", "trials", "value_min", "value_max", "ratio_min",
                "ratio_max")
SIGNIFICANT = 6


def rounded(values: np.ndarray) -> list[float | None]:
    """`values` to 6 significant digits (a shorter JSON number, the same chart), NaN as None.
    m / 10**k with m an integer and 10**k exact is the double nearest the decimal m·10^-k, so
    each number prints as its 6 digits at most."""
    magnitude = np.floor(np.log10(np.abs(np.where(np.isfinite(values) & (values != 0), values, 1.0))))
    decimals = (SIGNIFICANT - 1 - magnitude).astype(np.int64)
    scale = 10.0 ** np.abs(decimals)
    out = np.where(decimals >= 0, np.round(values * scale) / scale, np.round(values / scale) * scale).tolist()
    return [None if v != v else v for v in out] if np.isnan(values).any() else out


def point_columns(ints: dict[str, np.ndarray], floats: dict[str, np.ndarray], kept: np.ndarray) -> dict[str, list]:
    """The kept offsets of one series' columns (dashboards.columns.SeriesColumns) as JSON
    columns; a float column with no value is left out, but the value."""
    columns: dict[str, list] = {}
    for name in POINT_FIELDS:
        if name in floats:
            column = floats[name][kept]
            if name == "value" or not np.isnan(column).all():
                columns[name] = rounded(column)
        else:
            columns[name] = ints["position" if name == "index" else name][kept].tolist()
    return columns


def bounded_history_json(view: Any, width: int) -> dict[str, Any]:
    """The JSON body for `view` (a views.RepositoryHistory from dashboards.bounded whose series
    carry their kept points as `columns`, at most about `width` each); each series says how
    many points it has (`total`) and how many are sent (`sent`), so a chart can ask again for a
    narrower window."""
    cases, kept_indexes = [], set()
    for h in view.histories:
        series = []
        for s in h.series:
            kept_indexes.update(s.columns["index"])
            series.append({"fingerprint": s.fingerprint, "unit": s.unit, "higher_is_better": s.higher_is_better,
                           "device": view.devices.get(s.fingerprint or ""), "total": s.total,
                           "sent": len(s.columns["index"]), "points": s.columns})
        cases.append({"suite": h.suite, "target": h.target, "case": h.case, "units": h.units, "series": series,
                      "steps": [step_json(m) for m in h.steps],
                      "failed": [{"sha": f.sha, "index": f.index, "statuses": list(f.statuses)} for f in h.failed]})
    used = {sha for sha, index in view.positions.items() if index in kept_indexes}
    used |= {sha for h in view.histories for m in h.steps for sha in (m.first_sha, m.last_sha)}
    used |= {f.sha for h in view.histories for f in h.failed}
    return {"repository": view.repository.name, "encoding": "columns", "width": width,
            "commits": commit_columns(view, used), "cases": cases}


def step_json(m) -> dict[str, Any]:
    return {"kind": m.kind, "first_sha": m.first_sha, "last_sha": m.last_sha, "exact": m.exact,
            "first_index": m.first_index, "last_index": m.last_index,
            "rel": m.rel, "ci": list(m.ci) if m.ci else None, "job_id": m.job_id,
            "pr_number": m.pr_number, "subject": m.subject, "fixed_sha": m.fixed_sha}


def commit_columns(view: Any, shas: set[str]) -> dict[str, list]:
    ordered = sorted(shas, key=view.positions.__getitem__)
    metas = [view.revisions.get(sha) for sha in ordered]
    columns = {"index": [view.positions[sha] for sha in ordered], "sha": ordered,
               "subject": [m.subject if m else None for m in metas],
               "pr_number": [m.pr_number if m else None for m in metas],
               "authored_at": [m.authored_at.isoformat() if m and m.authored_at else None for m in metas]}
    return {k: v for k, v in columns.items() if k in ("index", "sha") or any(x is not None for x in v)}
