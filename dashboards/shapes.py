"""The spread and shape section of a job page (issue 46): per noisier or bimodal finding, a small
before/after distribution plot of the calls (each call's log time over its trial's median), drawn
as inline SVG from the geometry computed here, with the report's sentence beside it. Pure:
rendered from a JobRead alone."""

from __future__ import annotations

from dataclasses import dataclass

from perfbisect.service.jobs.schemas import OutcomeRead, ShapeRead
from perfbisect.service.reports.culprits import shape_sentence

WIDTH, HEIGHT, PAD = 320, 90, 4
BEFORE, AFTER = "#7a7a7a", "#b8321a"


@dataclass(frozen=True)
class ShapeChart:
    case: str
    kind: str
    words: str
    before: str  # SVG polyline points of the before side's share of calls per bin
    after: str
    zero_x: float  # where a call at its trial's median sits
    width: int = WIDTH
    height: int = HEIGHT


def _points(counts: list[int], peak: float) -> str:
    """A step outline of `counts` (as shares, scaled so the tallest share of either side fills
    the height) over WIDTH."""
    total = sum(counts) or 1
    step = (WIDTH - 2 * PAD) / max(1, len(counts))
    out = [f"{PAD:.1f},{HEIGHT - PAD:.1f}"]
    for k, c in enumerate(counts):
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (c / total) / peak
        out += [f"{PAD + k * step:.1f},{y:.1f}", f"{PAD + (k + 1) * step:.1f},{y:.1f}"]
    out.append(f"{WIDTH - PAD:.1f},{HEIGHT - PAD:.1f}")
    return " ".join(out)


def shape_chart(s: ShapeRead) -> ShapeChart | None:
    """The plot of one finding (None when it kept no histogram)."""
    h = s.histogram
    if h is None or not h.before or not h.after or len(h.edges) != len(h.before) + 1:
        return None
    shares = [c / (sum(h.before) or 1) for c in h.before] + [c / (sum(h.after) or 1) for c in h.after]
    peak = max(shares) or 1.0
    lo, hi = h.edges[0], h.edges[-1]
    zero = PAD + (WIDTH - 2 * PAD) * (0 - lo) / (hi - lo) if hi > lo else WIDTH / 2
    return ShapeChart(s.case, s.kind, shape_sentence(s), _points(h.before, peak), _points(h.after, peak),
                      min(max(zero, PAD), WIDTH - PAD))


def shape_charts(outcome: OutcomeRead | None) -> list[ShapeChart]:
    """One chart per finding of the job's outcome that has a histogram."""
    charts = [shape_chart(s) for s in (outcome.shapes if outcome else [])]
    return [c for c in charts if c is not None]
