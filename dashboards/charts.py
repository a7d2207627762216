"""Line charts as inline SVG text, drawn in Python: pure, no database, no JavaScript.

`render_svg(chart)` draws any `Chart`; `case_chart(history, commit_labels)` builds the chart of
one case's history (one solid line per fingerprint, its control dashed in the same colour, a
vertical line per exact culprit and a band per culprit range). Every point carries a <title>,
so the browser shows sha, subject and value on hover without any script.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape

from dashboards.history import CaseHistory

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 16, 30, 44
MAX_X_LABELS = 8


@dataclass(frozen=True)
class ChartPoint:
    x: float
    y: float
    title: str = ""


@dataclass(frozen=True)
class ChartLine:
    label: str
    points: tuple[ChartPoint, ...]
    color: str = PALETTE[0]
    dashed: bool = False


@dataclass(frozen=True)
class ChartMark:
    """A vertical line (x0 == x1) or a band (x0 < x1) with a short label and a hover title.
    `kind` becomes the CSS class: "step", "range" or "correctness"."""

    x0: float
    x1: float
    label: str
    title: str = ""
    kind: str = "step"


@dataclass(frozen=True)
class ChartFlag:
    """A small cross on the x axis at `x` (a commit that could not be measured)."""

    x: float
    title: str = ""


@dataclass(frozen=True)
class Chart:
    title: str
    lines: tuple[ChartLine, ...]
    marks: tuple[ChartMark, ...] = ()
    x_labels: Mapping[int, str] = field(default_factory=dict)
    flags: tuple[ChartFlag, ...] = ()
    y_label: str = ""
    width: int = 760
    height: int = 260


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] with about `count` ticks at a 1, 2, 2.5 or 5 x 10^k
    step. A flat range is widened by 5% (or by 1 around zero) so it still has a scale."""
    if lo > hi:
        lo, hi = hi, lo
    if lo == hi:
        pad = abs(lo) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    start, end = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    return [round(start + i * step, 12) for i in range(int(round((end - start) / step)) + 1)]


def format_value(v: float) -> str:
    """Compact number for axes and titles: 3 significant digits below 100, none above."""
    if v == 0:
        return "0"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _pick_labels(labels: Mapping[int, str], limit: int = MAX_X_LABELS) -> list[tuple[int, str]]:
    keys = sorted(labels)
    if len(keys) <= limit:
        return [(k, labels[k]) for k in keys]
    stride = math.ceil((len(keys) - 1) / (limit - 1))
    chosen = keys[::stride]
    if chosen[-1] != keys[-1]:
        chosen[-1] = keys[-1]
    return [(k, labels[k]) for k in chosen]


def _empty(chart: Chart) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {chart.width} 60" '
            f'role="img" aria-label="{escape(chart.title)}"><text x="{chart.width // 2}" y="34" '
            f'text-anchor="middle" class="empty">no measurements</text></svg>')


def render_svg(chart: Chart) -> str:
    """The chart as one <svg> element. All text is XML-escaped. A chart without points
    renders a small 'no measurements' placeholder."""
    points = [p for line in chart.lines for p in line.points]
    if not points:
        return _empty(chart)
    xs = [p.x for p in points] + [x for m in chart.marks for x in (m.x0, m.x1)] + [f.x for f in chart.flags]
    x0, x1 = min(xs), max(xs)
    if x0 == x1:
        x0, x1 = x0 - 0.5, x1 + 0.5
    ticks = nice_ticks(min(p.y for p in points), max(p.y for p in points))
    y0, y1 = ticks[0], ticks[-1]
    left, right = MARGIN_LEFT, chart.width - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, chart.height - MARGIN_BOTTOM

    def sx(x: float) -> float:
        return round(left + (x - x0) / (x1 - x0) * (right - left), 1)

    def sy(y: float) -> float:
        return round(bottom - (y - y0) / (y1 - y0) * (bottom - top), 1)

    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {chart.width} {chart.height}" '
           f'role="img" aria-label="{escape(chart.title)}">', f"<title>{escape(chart.title)}</title>"]
    for t in ticks:
        out.append(f'<line class="grid" x1="{left}" x2="{right}" y1="{sy(t)}" y2="{sy(t)}"/>'
                   f'<text class="ytick" x="{left - 6}" y="{sy(t) + 4}" text-anchor="end">{format_value(t)}</text>')
    if chart.y_label:
        out.append(f'<text class="ylabel" x="14" y="{(top + bottom) / 2}" text-anchor="middle" '
                   f'transform="rotate(-90 14 {(top + bottom) / 2})">{escape(chart.y_label)}</text>')
    for x, label in _pick_labels(chart.x_labels):
        if x0 <= x <= x1:
            anchor = "end" if sx(x) > right - 30 else "middle"  # the last label would spill off the right edge
            out.append(f'<text class="xtick" x="{sx(x)}" y="{bottom + 16}" text-anchor="{anchor}">{escape(label)}</text>')
    for mark in chart.marks:
        tip = f"<title>{escape(mark.title)}</title>" if mark.title else ""
        if mark.x1 > mark.x0:
            out.append(f'<rect class="mark {escape(mark.kind)}" x="{sx(mark.x0)}" y="{top}" '
                       f'width="{round(sx(mark.x1) - sx(mark.x0), 1)}" height="{bottom - top}">{tip}</rect>')
        else:
            out.append(f'<line class="mark {escape(mark.kind)}" x1="{sx(mark.x0)}" x2="{sx(mark.x0)}" '
                       f'y1="{top}" y2="{bottom}">{tip}</line>')
        out.append(f'<text class="marklabel {escape(mark.kind)}" x="{sx(mark.x1)}" y="{top - 4}" '
                   f'text-anchor="middle">{escape(mark.label)}</text>')
    for flag in chart.flags:
        out.append(f'<text class="flag" x="{sx(flag.x)}" y="{bottom + 4}" text-anchor="middle">×'
                   f"<title>{escape(flag.title)}</title></text>")
    for line in chart.lines:
        coords = " ".join(f"{sx(p.x)},{sy(p.y)}" for p in line.points)
        dash = ' stroke-dasharray="5 4"' if line.dashed else ""
        out.append(f'<polyline class="line" fill="none" stroke="{line.color}"{dash} points="{coords}">'
                   f"<title>{escape(line.label)}</title></polyline>")
        for p in line.points:
            out.append(f'<circle cx="{sx(p.x)}" cy="{sy(p.y)}" r="{2 if line.dashed else 3}" fill="{line.color}">'
                       f"<title>{escape(p.title)}</title></circle>")
    legend_x = left
    for line in chart.lines:
        dash = ' stroke-dasharray="5 4"' if line.dashed else ""
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 18}" y1="10" y2="10" stroke="{line.color}"{dash}/>'
                   f'<text class="legend" x="{legend_x + 22}" y="14">{escape(line.label)}</text>')
        legend_x += 30 + 7 * len(line.label)
    out.append(f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>'
               f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/></svg>')
    return "".join(out)


def _mark_title(mark) -> str:
    where = mark.last_sha[:10] if mark.exact else f"{mark.first_sha[:10]}..{mark.last_sha[:10]}"
    pr = f" (#{mark.pr_number})" if mark.pr_number else ""
    ci = f" [{mark.ci[0] * 100:+.1f}, {mark.ci[1] * 100:+.1f}]" if mark.ci else ""
    return f"{mark.label}{ci} at {where}{pr} {mark.subject or ''} (job {mark.job_id})".rstrip()


def case_chart(history: CaseHistory, commit_labels: Mapping[str, str] | None = None,
               x_labels: Mapping[int, str] | None = None) -> Chart:
    """The chart of one case: per fingerprint, the target's medians (solid) and the control's
    (dashed, same colour); culprits as marks. `commit_labels` maps sha -> hover text (subject,
    PR); `x_labels` maps commit index -> axis label (default: the short sha of each point)."""
    commit_labels = commit_labels or {}
    lines: list[ChartLine] = []
    labels: dict[int, str] = dict(x_labels or {})
    unit = ", ".join(history.units)
    for n, series in enumerate(history.series):
        color = PALETTE[n % len(PALETTE)]
        name = f"fp {series.fingerprint[:8]}" if series.fingerprint else "no fingerprint"
        suffix = f" {series.unit}" if series.unit else ""
        target_points, control_points = [], []
        for p in series.points:
            about = f"{p.sha[:10]} {commit_labels.get(p.sha, '')}".rstrip()
            target_points.append(ChartPoint(p.index, p.value, f"{about}: {format_value(p.value)}{suffix} "
                                                              f"(median of {p.trials})"))
            if p.control_value is not None:
                control_points.append(ChartPoint(p.index, p.control_value,
                                                 f"{about}: control {format_value(p.control_value)}{suffix}"))
            if x_labels is None:
                labels.setdefault(p.index, p.sha[:7])
        lines.append(ChartLine(label=name, points=tuple(target_points), color=color))
        if control_points:
            lines.append(ChartLine(label=f"{name} control", points=tuple(control_points), color=color, dashed=True))
    marks = []
    for m in history.steps:
        kind = "correctness" if m.kind == "correctness" else ("step" if m.exact else "range")
        marks.append(ChartMark(x0=m.first_index, x1=m.last_index, label=m.label, title=_mark_title(m), kind=kind))
    flags = tuple(ChartFlag(f.index, f"{f.sha[:10]} {commit_labels.get(f.sha, '')}: {', '.join(f.statuses)}")
                  for f in history.failed)
    return Chart(title=f"{history.case} ({history.target})", lines=tuple(lines), marks=tuple(marks),
                 x_labels=labels, flags=flags, y_label=unit)
