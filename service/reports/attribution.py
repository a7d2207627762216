"""The attribution section of a job's report: per case a small table (the bad end, each variant
with its culprits reverted: ratio to the control, the metric, the recovery with its interval),
the interaction, and the plain sentence. Text for terminals, Markdown for the PR comment and
GET /api/jobs/{id}/report?format=markdown. Pure: rendered from a JobRead alone."""

from __future__ import annotations

from rich.text import Text

from perfbisect.service.attribution.schemas import AttributionRead, CaseAttributionRead, EstimateRead
from perfbisect.service.jobs.schemas import JobRead

VERDICT_STYLE = {"interact": "bold yellow", "additive": "", "undetermined": "yellow"}


def _interval(e: EstimateRead) -> str:
    return f"{e.rel * 100:+.1f}% [{e.ci[0] * 100:+.1f}, {e.ci[1] * 100:+.1f}]"


def _number(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else (f"{v:.1f}" if abs(v) >= 100 else f"{v:.{digits}g}")


def _label(attribution: AttributionRead, culprits: list[int]) -> str:
    names = {c.index: c.label for c in attribution.culprits}
    return " + ".join(names.get(i, str(i)) for i in culprits)


COLUMNS = ["arm", "ratio to control", "metric", "recovery [95% CI]", "in the metric [95% CI]"]


def case_rows(attribution: AttributionRead, case: CaseAttributionRead) -> list[list[str]]:
    """COLUMNS rows: the bad end, then each variant (its recovery in the ratio to the control and
    in the metric itself)."""
    unit = case.unit or ""
    rows = [["bad end as it is", _number(case.head.ratio), f"{_number(case.head.value)} {unit}".strip(), "", ""]]
    for r in case.recoveries:
        rows.append([f"{_label(attribution, r.culprits)} reverted", _number(r.ratio),
                     f"{_number(r.value)} {unit}".strip(), _interval(r), _interval(r.metric) if r.metric else "-"])
    return rows


def basis(attribution: AttributionRead, case: CaseAttributionRead) -> str:
    """How the case's estimates were made: paired on side-by-side blocks (drift between blocks
    cancels), pooled over every trial (no complete block, e.g. a job from before blocks), or
    which of them fell back to pooled."""
    pooled = [r for r in case.recoveries if not r.paired]
    if not case.recoveries:
        return ""
    if not pooled:
        counts = sorted({r.blocks for r in case.recoveries})
        many = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        return f"paired: each variant against the bad end of its own side-by-side blocks ({many} a variant)"
    if len(pooled) == len(case.recoveries):
        return "pooled over every trial of each arm: no variant has a complete side-by-side block"
    names = ", ".join(f"{_label(attribution, r.culprits)} reverted" for r in pooled)
    also = " and the interaction" if case.interaction is not None and not case.interaction.paired else ""
    return (f"paired on side-by-side blocks, except {names}{also}: pooled over every trial "
            "(no complete block)")


def _interaction_line(case: CaseAttributionRead) -> str:
    in_metric = f" ({case.unit or 'metric'}: {_interval(case.interaction_metric)})" if case.interaction_metric else ""
    return f"{_interval(case.interaction)}{in_metric}"


def _problems(attribution: AttributionRead) -> list[str]:
    return [f"{c.label} {c.problem}" for c in attribution.culprits if c.problem]


def text_lines(job: JobRead) -> list[Text]:
    """The terminal section; empty when the job has no attribution report nor fix check."""
    fixes = [Text(""), Text("Fix check (culprits named earlier in this base):")] if job.fix_check else []
    fixes += [Text(f"  {row.case}: {row.words}") for row in job.fix_check]
    return fixes + _attribution_lines(job)


def _attribution_lines(job: JobRead) -> list[Text]:
    attribution = job.attribution
    if attribution is None:
        if job.attribution_job_id is not None:
            return [Text(""), Text(f"Attribution at the head: job {job.attribution_job_id} (not finished)")]
        return []
    lines = [Text(""), Text(f"Attribution at the head (job {attribution.job_id}, {attribution.status}; recovery = "
                            "change of the ratio to the control when reverted at the bad end, 95% CI):")]
    for case in attribution.cases:
        lines.append(Text(f"  {case.case}  ({basis(attribution, case)})" if case.recoveries else f"  {case.case}"))
        for row in case_rows(attribution, case):
            in_metric = f"  {case.unit or 'metric'} {row[4]}" if row[4] else ""
            lines.append(Text(f"    {row[0]:<34} ratio {row[1]:>7}  {row[2]:>16}  {row[3]}{in_metric}"))
        if case.interaction is not None:
            lines.append(Text(f"    interaction (together - sum of singles): {_interaction_line(case)}: "
                              f"{case.verdict}", VERDICT_STYLE.get(case.verdict or "", "")))
        lines.append(Text(f"    {case.words}"))
    lines += [Text(f"  {problem}", "yellow") for problem in _problems(attribution)]
    return lines


def markdown_lines(job: JobRead) -> list[str]:
    """The Markdown section: the fix check, then per case a table and its sentence."""
    out = ["", "**Fix check** (culprits named earlier in this base)", ""] if job.fix_check else []
    out += [f"- `{row.case}`: {row.words}" for row in job.fix_check]
    return out + _attribution_markdown(job)


def _attribution_markdown(job: JobRead) -> list[str]:
    attribution = job.attribution
    if attribution is None:
        return []
    out = ["", f"**Attribution at the head** (each culprit reverted at the bad end, alone and together; "
               f"change of the ratio to the control, 95% CI)"]
    for case in attribution.cases:
        out += ["", f"`{case.case}`", "", "| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                for row in case_rows(attribution, case)]
        if case.interaction is not None:
            out += ["", f"Interaction (all together minus the sum of the singles): {_interaction_line(case)}, "
                        f"**{case.verdict}**."]
        out += ["", case.words] + (["", f"_Estimates {basis(attribution, case)}._"] if case.recoveries else [])
    problems = _problems(attribution)
    if problems:
        out += [""] + [f"- {p}" for p in problems]
    return out
