"""One renderer for every message about an alert or a culprit: the PR comment's per-case table
(Markdown) and the plain text of the notifications (webhook JSON's `lines`, Slack, email). Both
say the same things the same way: the culprit's PR number and subject, the step per case with its
95% interval, the decision metric before → after with its name and the measured value with its
unit (TFLOP/s, GB/s), the error against the tolerance for wrong results, and links to the
dashboard pages of the alert, the job and each case's chart (never the JSON API); for a spread or
mode step (issue 46), the calls' spread before → after and its ratio. Pure."""

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
    kind: str = "regression"  # noisier, bimodal: rel is the spread's ratio - 1, the means its spreads


@dataclass(frozen=True)
class Link:
    """A page a person follows: the alert, the job, a case's chart, the PR."""

    label: str
    url: str


METRIC_NAMES = {"ratio": "ratio to the control (higher is faster)", "raw": "target metric"}
METRIC_SHORT = {"ratio": "ratio to the control", "raw": "target metric"}


def _num(x: Any) -> str:
    return f"{float(x):.4g}" if x is not None else "?"


def error_text(wrong: Mapping[str, Any] | None) -> str:
    """A wrong case's largest error against the tolerance it broke (never a bare percentage)."""
    if not wrong or wrong.get("error") is None:
        return "error not recorded"
    tolerance = f" against tolerance {_num(wrong['tolerance'])}" if wrong.get("tolerance") is not None else ""
    return f"error {_num(wrong['error'])}{tolerance}"


def _wrong_row(step: CaseStep, wrong: Mapping[str, Any] | None) -> str:
    return f"| `{step.case}` | passes → wrong results ({error_text(wrong)}) | – | – |"


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


SHAPE_KINDS = ("noisier", "bimodal")
SHAPE_WORDS = {"noisier": "calls noisier", "bimodal": "calls bimodal (a second mode)"}


def spread_text(case: str, kind: str, rel: float, before: float | None, after: float | None,
                pvalue: float | None) -> str:
    """A spread or mode step in plain text (issue 46): what changed, the within-trial spread
    before → after (the robust sd of the log call time, as a share of the median) and its ratio."""
    spread = f"spread {before:.1%} → {after:.1%}" if before is not None and after is not None else "spread"
    p = f", p={pvalue:.2g}" if pvalue is not None else ""
    return f"{case}: {SHAPE_WORDS.get(kind, kind)}, {spread} of the median call (x{1 + rel:.2f}{p})"


def _shape_row(step: CaseStep) -> str:
    spread = (f"spread {step.mean_before:.1%} → {step.mean_after:.1%}"
              if step.mean_before is not None and step.mean_after is not None else "–")
    p = f" (p={step.pvalue:.2g})" if step.pvalue is not None else ""
    return f"| `{step.case}` | {SHAPE_WORDS.get(step.kind, step.kind)}: {spread} | – | x{1 + step.rel:.2f}{p} |"


def case_table(steps: Sequence[CaseStep], metric: str, effects: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown rows: case, the decision metric before → after, the value with its unit, the step
    [95% CI]. `effects` are the bisect culprit's per-case effects (or a correctness culprit's
    wrong cases), keyed by case name."""
    rows = [f"| case | {METRIC_NAMES.get(metric, metric)}, before → after | measured, before → after "
            "| step [95% CI] |", "|---|---|---|---|"]
    for step in steps:
        if step.kind in SHAPE_KINDS:
            rows.append(_shape_row(step))
            continue
        rows.append(_wrong_row(step, effects.get(step.case)) if step.rel is None
                    else _perf_row(step, effects.get(step.case)))
    return rows


def measured_text(effect: Mapping[str, Any]) -> str | None:
    """The measured value before → after with its unit (612 → 259.5 TFLOP/s); None unknown."""
    if effect.get("before_value") is None or effect.get("after_value") is None:
        return None
    return f"{_num(effect['before_value'])} → {_num(effect['after_value'])} {effect.get('unit') or ''}".rstrip()


def step_text(case: str, effect: Mapping[str, Any], metric: str) -> str:
    """One case's step in plain text: the step [95% CI], the decision metric before → after with
    its name, the measured value with its unit. `effect`: a culprit's stored effect (rel, ci,
    before, after, before_value, after_value, unit), or as much of it as is known."""
    ci = effect.get("ci")
    parts = [f"{case}: {effect['rel']:+.1%}" + (f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else "")]
    if effect.get("before") is not None and effect.get("after") is not None:
        parts.append(f"{METRIC_SHORT.get(metric, metric)} {_num(effect['before'])} → {_num(effect['after'])}")
    measured = measured_text(effect)
    if measured:
        parts.append(measured)
    return ", ".join(parts)


def wrong_text(case: str, wrong: Mapping[str, Any] | None) -> str:
    return f"{case}: wrong results, {error_text(wrong)}"


def commit_text(sha: str, subject: str | None, pr: int | None) -> str:
    """The culprit as a person names it: its PR number and subject (without a trailing `(#N)` that
    repeats the number), then the commit."""
    if pr and subject and subject.endswith(f" (#{pr})"):
        subject = subject[: -len(f" (#{pr})")]
    named = " ".join(x for x in (f"#{pr}" if pr else "", subject or "") if x)
    return f"{named} ({sha[:10]})" if named else sha[:10]


def page_links(public_url: str | None, repository: str, alert_id: int | None, job_id: int | None,
               cases: Sequence[str], job_label: str = "bisect job") -> list[Link]:
    """The dashboard pages of the alert, the job and each case's chart (never the JSON API: a
    person follows them); [] without a public URL."""
    if not public_url:
        return []
    base = public_url.rstrip("/")
    out = [Link(f"alert #{alert_id}", f"{base}/dashboard/alerts/{alert_id}")] if alert_id is not None else []
    if job_id is not None:
        out.append(Link(f"{job_label} {job_id}", f"{base}/dashboard/jobs/{job_id}"))
    return out + [Link(f"chart: {case}", f"{base}{history_path(repository, case)}") for case in cases]


def links(public_url: str | None, repository: str, alert_id: int, job_id: int | None,
          cases: Sequence[str], job_label: str = "bisect job") -> list[str]:
    """The page links as Markdown, for the PR comment."""
    found = page_links(public_url, repository, alert_id, job_id, cases, job_label)
    return [f"[{link.label}]({link.url})" for link in found]


def plain_text(payload: Mapping[str, Any]) -> str:
    """A notification as text (Slack's message, the email's body): its title, its lines, then
    each link as `label: url` (or its one page without links)."""
    out = [payload["title"], *payload["lines"]]
    if payload.get("links"):
        out += [f"{link['label']}: {link['url']}" for link in payload["links"]]
    elif payload.get("url"):
        out.append(payload["url"])
    return "\n".join(out)


WHY_KINDS = ("hunk:", "kernel", "compiled:", "autotuner: ")


def why_line(lines: Sequence[str]) -> str | None:
    """A culprit's evidence in one line (issue 43): its two most telling 'why' lines (the hunk,
    the kernel that carries the step, the compiled code, a flipped autotuner choice), else the
    first, which then says why there is none; None without evidence."""
    shown = [line for line in lines if line.startswith(WHY_KINDS) and "same configuration" not in line]
    if shown:
        return "; ".join(shown[:2])
    return lines[0] if lines else None


def evidence_page(job_id: int, sha: str, public_url: str | None = None) -> str:
    """The job page's evidence of one culprit (its kernel, metadata and op-count tables, IR diff)."""
    return f"{(public_url or '').rstrip('/')}/dashboard/jobs/{job_id}#evidence-{sha[:12]}"


def why_markdown(lines: Sequence[str], job_id: int, sha: str, public_url: str | None) -> str | None:
    """The PR comment's line for one culprit: `**Why** (abc1234567): ... · [evidence](...)`."""
    line = why_line(lines)
    if line is None:
        return None
    link = f" · [evidence]({evidence_page(job_id, sha, public_url)})" if public_url else ""
    return f"**Why** (`{sha[:10]}`): {line.replace('|', '/')}{link}"
