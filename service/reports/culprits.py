"""The culprit table, as in the seed's hand-made one: revision, PR, subject, and per case the
value before and after the step, the step and its interval. Text for terminals, Markdown for PRs."""

from __future__ import annotations

from service.jobs.schemas import CulpritRead, JobRead


def _value(v: float | None) -> str:
    return "-" if v is None else (f"{v:.1f}" if abs(v) >= 10 else f"{v:.4g}")


def _step(e) -> str:
    return f"{e.rel * 100:+.1f}% [{e.ci[0] * 100:+.1f}, {e.ci[1] * 100:+.1f}]"


def _where(c: CulpritRead) -> str:
    return c.last_sha[:10] if c.exact else f"{c.first_sha[:10]}..{c.last_sha[:10]}"


def _pr(c: CulpritRead) -> str:
    return f"#{c.pr_number}" if c.pr_number else ""


def moved(effect, min_effect: float) -> bool:
    """A case moved at a culprit when its step reaches the minimum and its interval excludes 0."""
    return abs(effect.rel) >= min_effect and (effect.ci[0] > 0 or effect.ci[1] < 0)


def culprit_rows(job: JobRead, *, all_cases: bool = False) -> list[list[str]]:
    """One row per case that moved at each performance culprit (every case with all_cases)."""
    rows = []
    min_effect = job.spec.get("min_effect", 0.0)
    for c in job.culprits:
        if c.kind != "performance":
            continue
        effects = {k: e for k, e in c.effects.items() if all_cases or moved(e, min_effect)} or c.effects
        for i, (case, e) in enumerate(sorted(effects.items())):
            head = [_where(c), _pr(c), (c.subject or "")[:48]] if i == 0 else ["", "", ""]
            unit = f" {e.unit}" if e.unit else ""
            rows.append([*head, case, f"{_value(e.before_value)} -> {_value(e.after_value)}{unit}", _step(e)])
    return rows


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def culprit_table(job: JobRead) -> str:
    p = job.progress
    lines = [f"job {job.id} ({job.kind}, {job.status}): {job.spec.get('good')}..{job.spec.get('bad')} "
             f"in {job.repository}, {p.get('revisions', '?')} revisions, {p.get('measured', 0)} measured, "
             f"{p.get('trials', 0)} trials, {p.get('rounds', 0)} rounds"]
    rows = culprit_rows(job)
    if rows:
        lines += ["", "Performance culprits (step = relative change of the "
                  f"{'control ratio' if job.spec.get('metric', 'ratio') == 'ratio' else 'metric'}, 95% CI; "
                  "cases that did not move are left out):",
                  _table(["revision", "PR", "subject", "case", "before -> after", "step [95% CI]"], rows)]
    elif job.status == "succeeded":
        lines += ["", "No performance step above the minimum effect "
                  f"({job.spec.get('min_effect', 0) * 100:.1f}%) in this range."]
    wrong = [c for c in job.culprits if c.kind == "correctness"]
    if wrong:
        lines += ["", "Correctness (wrong results at full speed is a failure, not a speed-up):"]
        for c in wrong:
            fixed = f"fixed at {c.fixed_sha[:10]}" if c.fixed_sha else "not fixed in this range"
            lines.append(f"  {c.first_sha[:10]} {_pr(c)} {c.subject or ''}: first wrong results; {fixed}")
    if job.error:
        lines += ["", f"error: {job.error}"]
    return "\n".join(lines)


def markdown_report(job: JobRead) -> str:
    rows = culprit_rows(job)
    out = [f"### perfbisect: {job.kind} {job.spec.get('good')}..{job.spec.get('bad')} ({job.status})", ""]
    if rows:
        out += ["| revision | PR | subject | case | before → after | step [95% CI] |", "|---|---|---|---|---|---|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    else:
        out.append(f"No performance change above {job.spec.get('min_effect', 0) * 100:.1f}% on the measured cases.")
    for c in job.culprits:
        if c.kind == "correctness":
            out.append(f"\n:warning: wrong results from `{c.first_sha[:10]}`"
                       + (f", fixed at `{c.fixed_sha[:10]}`" if c.fixed_sha else ""))
    p = job.progress
    out.append(f"\n<sub>{p.get('trials', 0)} trials over {p.get('measured', 0)} revisions; cold caches, "
               "control timed in the same process.</sub>")
    return "\n".join(out)
