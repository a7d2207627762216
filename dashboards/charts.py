"""What the browser draws for one chart, as JSON-ready dicts: pure, no database.

The charts are drawn by uPlot (shipped in dashboards/static/vendor, no CDN) from the dict that
`case_chart` builds: per series (one per fingerprint, or per case when several shapes are
overlaid) the per-revision medians of the value and of the ratio to the control with the trials'
min..max as a band, and per commit its sha, subject, PR and links. Steps are only those whose
interval passed the job's threshold (service.bisect.model.stored_step_moved); failed trials are flags.
`static/charts.js` turns this into the interactive chart; the HTML table under each chart
holds the same numbers for screen readers and for copying.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfbisect.dashboards.history import CaseHistory, Series
from perfbisect.dashboards.links import RepoLinks

PALETTE = ("#1f5fa8", "#b8321a", "#21762f", "#6f3fa0", "#a35a00", "#7a4a2f", "#0f6f7d")


def format_value(v: float) -> str:
    """Compact number for tables and titles: 3 significant digits below 100, none above."""
    if v == 0:
        return "0"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def describe_device(provenance: Mapping[str, Any] | None) -> str:
    """'NVIDIA H200 · CUDA 12.8 · torch 2.11.0 · triton 3.6.0' from a trial's provenance."""
    if not provenance:
        return ""
    parts = [str(provenance.get("name") or provenance.get("kind") or "")]
    for key, label in (("arch", ""), ("cuda", "CUDA"), ("hip", "HIP"), ("torch", "torch"), ("triton", "triton"),
                       ("driver", "driver")):
        if provenance.get(key):
            parts.append(f"{label} {provenance[key]}".strip())
    return " · ".join(p for p in parts if p)


def series_label(series: Series, devices: Mapping[str, str]) -> str:
    device = devices.get(series.fingerprint or "", "")
    short = f"fp {series.fingerprint[:8]}" if series.fingerprint else "no fingerprint"
    return f"{device} ({short})" if device else short


def _series(series: Series, label: str, color: str, case: str) -> dict[str, Any]:
    return {"label": label, "fingerprint": series.fingerprint, "unit": series.unit, "color": color,
            "higher_is_better": series.higher_is_better, "case": case, "total": series.total,
            "points": [{"x": p.index, "sha": p.sha, "value": p.value, "value_min": p.value_min,
                        "value_max": p.value_max, "control": p.control_value, "ratio": p.ratio,
                        "ratio_min": p.ratio_min, "ratio_max": p.ratio_max, "trials": p.trials}
                       for p in series.points]}


def case_chart(histories: Sequence[CaseHistory], commits: Mapping[str, dict[str, Any]],
               devices: Mapping[str, str] | None = None, *, title: str | None = None,
               links: RepoLinks | None = None) -> dict[str, Any]:
    """One chart of one case (or of several shapes of one kernel overlaid: then one series per
    case, labelled by its name). `commits` maps sha -> {subject, pr_number, date}; `links` gives
    the chart the templates of a commit's and a pull request's pages ("{sha}", "{pr}"; null off
    GitHub/GitLab), which static/charts.js fills in; `devices` maps fingerprint -> device and
    toolchain text."""
    devices = devices or {}
    overlay = len(histories) > 1
    series, steps, failed = [], [], []
    for h in histories:
        for s in h.series:
            label = h.case if overlay else series_label(s, devices)
            if overlay and len(h.series) > 1:
                label = f"{h.case} · {series_label(s, devices)}"
            series.append(_series(s, label, PALETTE[len(series) % len(PALETTE)], h.case))
        steps += [{"x0": m.first_index, "x1": m.last_index, "kind": m.kind, "label": m.label,
                   "case": h.case, "sha": m.last_sha, "rel": m.rel, "ci": list(m.ci) if m.ci else None,
                   "job_id": m.job_id, "pr_number": m.pr_number} for m in h.steps]
        failed += [{"x": f.index, "sha": f.sha, "statuses": list(f.statuses)} for f in h.failed]
    shas = {p["sha"] for s in series for p in s["points"]} | {f["sha"] for f in failed} | {m["sha"] for m in steps}
    units = sorted({s["unit"] for s in series if s["unit"]})
    return {"title": title or (f"{histories[0].case} ({histories[0].target})" if histories else ""),
            "unit": ", ".join(units), "series": series, "steps": steps, "failed": failed,
            "commits": {sha: commits[sha] for sha in shas if sha in commits},
            "commit_url": links.commit("{sha}") if links else None,
            "pr_url": links.pull("{pr}") if links else None}


def commit_info(revisions: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """sha -> what a tooltip shows of the commit (its links come from the chart's templates: one
    URL per commit was a third of a long history page)."""
    return {sha: {"subject": meta.subject, "pr_number": meta.pr_number,
                  "date": meta.authored_at.strftime("%Y-%m-%d") if meta.authored_at else None}
            for sha, meta in revisions.items()}
