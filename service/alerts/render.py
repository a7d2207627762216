"""The per-case table and the links of an alert's PR comment, as a bisect or compare report
labels them: the decision metric with its name, the measured value with its unit, the step with
its 95% interval (from the alert's bisect, which measured both sides of the culprit), and links
to the alert, the bisect job and each case's chart. Pure: rows and effects in, Markdown out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfbisect.service.reports.culprits import history_path


@dataclass(frozen=True)
class CaseStep:
    """One case of an alert: the tracked history's step (the alert's own statistics)."""

    case: str
    rel: float | None  # None: wrong results
    mean_before: float | None
    mean_after: float | None
    pvalue: float | None


METRIC_NAMES = {"ratio": "ratio to the control (higher is faster)", "raw": "target metric"}


def _num(x: Any) -> str:
    return f"{float(x):.4g}" if x is not None else "?"


def _wrong_row(step: CaseStep, wrong: Mapping[str, Any] | None) -> str:
    detail = ""
    if wrong and wrong.get("error") is not None:
        tolerance = f" vs tolerance {_num(wrong['tolerance'])}" if wrong.get("tolerance") is not None else ""
        detail = f" (error {_num(wrong['error'])}{tolerance})"
    return f"| `{step.case}` | passes → wrong results{detail} | – | – |"


def _perf_row(step: CaseStep, effect: Mapping[str, Any] | None) -> str:
    if effect and effect.get("ci"):
        lo, hi = effect["ci"]
        metric = f"{_num(effect.get('before'))} → {_num(effect.get('after'))}"
        value = (f"{_num(effect['before_value'])} → {_num(effect['after_value'])} {effect.get('unit') or ''}".rstrip()
                 if effect.get("before_value") is not None and effect.get("after_value") is not None else "–")
        return f"| `{step.case}` | {metric} | {value} | {effect['rel']:+.1%} [{lo:+.1%}, {hi:+.1%}] |"
    # no bisect measured both sides (the culprit is a measured head): the history's step and its test
    p = f" (p={step.pvalue:.2g}, no interval: not bisected)" if step.pvalue is not None else ""
    return f"| `{step.case}` | {_num(step.mean_before)} → {_num(step.mean_after)} | – | {step.rel:+.1%}{p} |"


def case_table(steps: Sequence[CaseStep], metric: str, effects: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown rows: case, the decision metric before → after, the value with its unit, the step
    [95% CI]. `effects` are the bisect culprit's per-case effects (or a correctness culprit's
    wrong cases), keyed by case name."""
    rows = [f"| case | {METRIC_NAMES.get(metric, metric)}, before → after | measured, before → after "
            "| step [95% CI] |", "|---|---|---|---|"]
    for step in steps:
        rows.append(_wrong_row(step, effects.get(step.case)) if step.rel is None
                    else _perf_row(step, effects.get(step.case)))
    return rows


def links(public_url: str | None, repository: str, alert_id: int, job_id: int | None,
          cases: Sequence[str]) -> list[str]:
    """Links to the dashboard pages of the alert, the bisect job and each case's chart (never the
    JSON API: a person follows them); [] without a public URL."""
    if not public_url:
        return []
    base = public_url.rstrip("/")
    out = [f"[alert #{alert_id}]({base}/dashboard/alerts/{alert_id})"]
    if job_id is not None:
        out.append(f"[bisect job {job_id}]({base}/dashboard/jobs/{job_id})")
    out += [f"[chart: {case}]({base}{history_path(repository, case)})" for case in cases]
    return out
