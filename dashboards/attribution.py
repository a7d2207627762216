"""The attribution section of a job page: per case the table of the text report and a bar chart
of the recoveries (each variant against the bad end, with its interval) and the interaction,
drawn as inline SVG from the geometry computed here. Pure: rendered from a JobRead alone; the
table holds the same numbers for screen readers and for copying."""

from __future__ import annotations

from dataclasses import dataclass

from perfbisect.service.attribution.schemas import AttributionRead, CaseAttributionRead, EstimateRead
from perfbisect.service.reports.attribution import COLUMNS, basis, case_rows

WIDTH, LABEL_W, ROW_H, PAD = 560, 170, 22, 8
RECOVERS, COSTS, INTERACTION = "#21762f", "#b8321a", "#6f3fa0"


@dataclass(frozen=True)
class Bar:
    label: str
    text: str  # '+42.9% [+38.0, +47.9]'
    y: int
    x: float  # left edge of the bar (the zero line or the bar's end, whichever is left)
    width: float
    ci_x1: float
    ci_x2: float
    color: str


@dataclass(frozen=True)
class CaseChart:
    case: str
    words: str
    verdict: str | None
    rows: list[list[str]]
    bars: list[Bar]
    zero_x: float
    height: int
    basis: str = ""  # paired on side-by-side blocks, or pooled (reports.attribution.basis)
    width: int = WIDTH
    columns: tuple[str, ...] = tuple(COLUMNS)


def _text(e: EstimateRead) -> str:
    return f"{e.rel * 100:+.1f}% [{e.ci[0] * 100:+.1f}, {e.ci[1] * 100:+.1f}]"


def case_chart(attribution: AttributionRead, case: CaseAttributionRead) -> CaseChart:
    """Bars on one scale around a zero line: a recovery right (green), a cost left (red), the
    interaction last (purple); whiskers are the 95% intervals."""
    names = {c.index: c.label for c in attribution.culprits}
    items = [(" + ".join(names.get(i, str(i)) for i in r.culprits) + " reverted", r, None) for r in case.recoveries]
    if case.interaction is not None:
        items.append(("interaction", case.interaction, INTERACTION))
    span = max([abs(b) for _, e, _ in items for b in (*e.ci, e.rel)] + [0.01])
    plot_w = WIDTH - LABEL_W - 2 * PAD
    zero = LABEL_W + PAD + plot_w / 2

    def x_of(rel: float) -> float:
        return round(zero + rel / span * plot_w / 2, 1)

    bars = []
    for n, (label, e, color) in enumerate(items):
        end = x_of(e.rel)
        bars.append(Bar(label=label, text=_text(e), y=PAD + n * ROW_H, x=min(zero, end), width=round(abs(end - zero), 1),
                        ci_x1=x_of(e.ci[0]), ci_x2=x_of(e.ci[1]),
                        color=color or (RECOVERS if e.rel >= 0 else COSTS)))
    return CaseChart(case=case.case, words=case.words, verdict=case.verdict, rows=case_rows(attribution, case),
                     bars=bars, zero_x=round(zero, 1), height=2 * PAD + ROW_H * max(len(bars), 1),
                     basis=basis(attribution, case))


def attribution_charts(attribution: AttributionRead | None) -> list[CaseChart]:
    return [case_chart(attribution, case) for case in attribution.cases] if attribution else []
