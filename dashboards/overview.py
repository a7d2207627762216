"""The all-cases overview of a repository: per case its latest value, a sparkline of its newest
points and its latest step. Pure: built from CaseHistory objects, no database."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from perfbisect.dashboards.history import CaseHistory, StepMark

SPARK_W, SPARK_H = 120, 24


@dataclass(frozen=True)
class OverviewRow:
    suite: str
    target: str
    case: str
    unit: str | None
    latest_sha: str | None
    latest_value: float | None
    latest_ratio: float | None
    points: int
    sparkline: str  # inline SVG of the newest ratios (values when there is no control)
    latest_step: StepMark | None


def sparkline(values: list[float], title: str) -> str:
    """A tiny polyline of `values` (oldest first), scaled to its own range."""
    if len(values) < 2:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    step = SPARK_W / (len(values) - 1)
    coords = " ".join(f"{i * step:.1f},{SPARK_H - 2 - (v - lo) / span * (SPARK_H - 4):.1f}" for i, v in enumerate(values))
    return (f'<svg class="spark" width="{SPARK_W}" height="{SPARK_H}" viewBox="0 0 {SPARK_W} {SPARK_H}" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
            f'<polyline fill="none" stroke="#1f5fa8" stroke-width="1.5" points="{coords}"/></svg>')


def overview_row(history: CaseHistory) -> OverviewRow:
    """The first fingerprint line (the one with the most points) stands for the case."""
    series = max(history.series, key=lambda s: len(s.points))
    ratios = [p.ratio for p in series.points if p.ratio is not None]
    shown = ratios if len(ratios) == len(series.points) else [p.value for p in series.points]
    latest = series.points[-1] if series.points else None
    what = "ratio to the control" if shown is ratios else (series.unit or "value")
    return OverviewRow(
        suite=history.suite, target=history.target, case=history.case, unit=series.unit,
        latest_sha=latest.sha if latest else None, latest_value=latest.value if latest else None,
        latest_ratio=latest.ratio if latest else None, points=len(series.points),
        sparkline=sparkline(shown, f"{history.case}: newest {len(shown)} points, {what}"),
        latest_step=history.steps[-1] if history.steps else None)
