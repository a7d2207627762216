"""The job report for terminals (and GET /api/jobs/{id}/report): the verdict with its counts, each
culprit with its subject and, per case that moved, the step in the quantity it was decided on
(the ratio to the control, or the raw metric) next to the absolute metric, each labelled; then
the outcome of every case, with the error of a failed end, and the noise warning.

The text fits `width` columns (100 by default), cutting subjects at whole words; `wide` gives one
row per case with every column. Lines are rich Text, so the CLI colours regressions red and
improvements green; `culprit_table` returns the plain text.
"""

from __future__ import annotations

import re
import textwrap
from urllib.parse import quote

from rich.text import Text

from perfbisect.service.bisect.model import step_moved
from perfbisect.service.toolchains.rules import version_of
from perfbisect.service.job_spec import toolchain_of
from perfbisect.service.jobs.schemas import CaseEffectRead, CulpritRead, JobRead, ShapeRead
from perfbisect.service.reports.attribution import text_lines as attribution_lines

STYLE = {"regressed": "bold red", "regression": "red", "improved": "bold green", "improvement": "green",
         "failed": "bold red", "inconclusive": "bold yellow", "unchanged": "", "warning": "yellow"}
ERROR_LINES = 4


def value(v: float | None) -> str:
    return "-" if v is None else (f"{v:.1f}" if abs(v) >= 10 else f"{v:.4g}")


def pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def step_text(e: CaseEffectRead, min_effect: float | None = None) -> str:
    """The step and its interval; with the job's `min_effect`, a step that the interval alone
    would name but the case's verdict did not is labelled so (a table of every case shows it)."""
    text = f"{pct(e.rel)} [{e.ci[0] * 100:+.1f}, {e.ci[1] * 100:+.1f}]"
    if e.control_step is not None:
        text += f" (the target's own metric: the control moved {pct(e.control_step)} here)"
    if min_effect is not None and not e.confirmed and step_moved(e.rel, e.ci, min_effect):
        text += " (not confirmed: under the smallest step this job can tell on this case)"
    return text


def short(sha: str) -> str:
    """A revision as shown: a commit cut to 10 characters, a toolchain bisect's version whole."""
    return sha if "==" in sha else sha[:10]


def where(c: CulpritRead) -> str:
    return short(c.last_sha) if c.exact else f"{short(c.first_sha)}..{short(c.last_sha)}"


def toolchain_lines(job: JobRead) -> list[Text]:
    """A toolchain bisect (issue 44): the commit it measured, its versions, the first that moved."""
    axis = toolchain_of(job.spec)
    if axis is None:
        return []
    at = axis.commit[:10] if axis.commit else ref(job.spec.good)
    lines = [Text(f"toolchain {axis.package} at {at}: versions {', '.join(axis.versions)} (from {axis.wheelhouse})")]
    for c in (c for c in job.culprits if c.kind == "performance"):
        first = version_of(c.first_sha)
        earlier = axis.versions[axis.versions.index(first) - 1] if first in axis.versions[1:] else None
        since = f" (after {earlier})" if earlier else ""
        lines.append(Text(f"first version that moves: {axis.package} {version_of(c.last_sha)}{since}"
                          if c.exact else f"the step is in {axis.package} {first}..{version_of(c.last_sha)}", "bold"))
    return lines


def pr_label(c: CulpritRead) -> str:
    return f"#{c.pr_number}" if c.pr_number else ""


def ref(name: object) -> str:
    """A ref as given, a full sha cut to 10 characters."""
    text = str(name)
    return text[:10] if re.fullmatch(r"[0-9a-f]{40}", text) else text


def decided_on(job: JobRead) -> str:
    """What the step is a relative change of."""
    return "ratio to control" if job.spec.metric == "ratio" else "metric"


def moved(effect: CaseEffectRead, min_effect: float) -> bool:
    """A case moved at a culprit when its own verdict confirmed a step that reaches the minimum
    with an interval that excludes 0 (`step_moved`, the planner's rule)."""
    return step_moved(effect.rel, effect.ci, min_effect, effect.confirmed)


def is_regression(job: JobRead, culprit: CulpritRead, case: str, effect: CaseEffectRead) -> bool:
    """From the stored outcome when there is one (it knows the metric's direction); else the
    ratio's and a rate's rule: lower is worse."""
    for c in (job.outcome.cases if job.outcome else []):
        if c.case == case:
            for s in c.steps:
                if s.last_sha == culprit.last_sha:
                    return s.regression
    return effect.rel < 0


def moved_effects(job: JobRead, c: CulpritRead, *, all_cases: bool = False) -> dict[str, CaseEffectRead]:
    """The cases that moved at this culprit (all when none did, or with all_cases)."""
    min_effect = job.spec.min_effect
    return {k: e for k, e in sorted(c.effects.items()) if all_cases or moved(e, min_effect)} or dict(sorted(c.effects.items()))


def before_after(job: JobRead, e: CaseEffectRead) -> tuple[str, str]:
    """The decision quantity before -> after (what the step is a change of), and the absolute metric."""
    decided = f"{e.before:#.4g} -> {e.after:#.4g}"
    absolute = f"{value(e.before_value)} -> {value(e.after_value)}{' ' + e.unit if e.unit else ''}"
    return decided, absolute


def culprit_rows(job: JobRead, *, all_cases: bool = False) -> list[list[str]]:
    """One row per case that moved at each performance culprit: revision, PR, subject, case,
    before -> after (the decision quantity, then the absolute metric), step [95% CI]."""
    rows = []
    for c in job.culprits:
        if c.kind != "performance":
            continue
        for i, (case, e) in enumerate(moved_effects(job, c, all_cases=all_cases).items()):
            head = [where(c), pr_label(c), c.subject or ""] if i == 0 else ["", "", ""]
            decided, absolute = before_after(job, e)
            label = "ratio" if job.spec.metric == "ratio" else ""
            rows.append([*head, case, f"{label} {decided}; {absolute}".strip(),
                         step_text(e, job.spec.min_effect)])
    return rows


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return [fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)]


def headline(job: JobRead) -> Text:
    if job.kind == "attribute":  # no per-case verdict: the attribution section says what it found
        return Text(f"attribution of the culprits of bisect {job.spec.parent_job_id} at its bad end: {job.status}")
    if job.kind == "localize":  # the hunks: GET /api/jobs/{bisect}/culprits/{sha}/evidence, the demo's 'why' block
        return Text(f"hunk localization of the culprits of bisect {job.spec.parent_job_id}: {job.status}")
    if job.outcome is None:
        return Text(f"verdict: none ({'the job ' + job.status if job.status in ('failed', 'cancelled') else 'not finished'})")
    counts = job.outcome.counts
    words = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("regressed", "improved", "unchanged", "inconclusive", "failed"))
    line = Text("verdict: ")
    line.append(job.outcome.verdict.upper(), STYLE[job.outcome.verdict])
    line.append(f" ({words})")
    return line


def gap_clause(job: JobRead, code: str = "") -> str | None:
    """What the unchanged cases' verdict covers (issue 46): None when every revision was measured
    or the job predates the field; `code` wraps shas and options (a backtick in Markdown)."""
    gap = job.outcome.gap if job.outcome else None
    if gap is None:
        return None
    return (f"a step undone within {gap.commits} consecutive commits ({code}{short(gap.after_sha)}..{short(gap.before_sha)}"
            f"{code}, {gap.unseen} not measured) would not be seen; {code}--scan auto{code} (or a smaller "
            f"{code}--max-gap{code}) narrows it")


def no_step_sentence(job: JobRead) -> str:
    """An unchanged range in words, never "no step" without what a step had to outlast to be seen."""
    said = f"No performance step above the minimum effect ({job.spec.min_effect * 100:.1f}%)"
    if (clause := gap_clause(job)) is not None:
        return f"{said} that lasts {job.outcome.gap.commits} commits or more: {clause}."
    p = job.progress
    if p.get("measured", 0) >= p.get("revisions", 0) > 0:
        return f"{said} at any revision of this range (every one was measured)."
    return f"{said} at the {p.get('measured', '?')} of {p.get('revisions', '?')} revisions measured."


def case_labels(names: list[str], width: int) -> dict[str, str]:
    """Each case name in at most `width` columns, the labels kept distinct: cut at the end when
    that keeps them apart; else the middle elided, then the head (cases of one suite file share a
    long prefix and differ in their last parameters: "source:x.py@sha BT=8192,V=128256,dtype=bf16"
    and "...dtype=fp32" cut at the end read the same); else the full names, however long."""
    if all(len(n) <= width for n in names):
        return {n: n for n in names}
    keep = max(width - 3, 1)
    head = keep // 3
    for cut in (lambda n: n[:keep] + "...",
                lambda n: n[:head] + "..." + n[len(n) - (keep - head):],
                lambda n: "..." + n[len(n) - keep:]):
        labels = {n: n if len(n) <= width else cut(n) for n in names}
        if len(set(labels.values())) == len(set(names)):
            return labels
    return {n: n for n in names}


def range_note(job: JobRead, c: CulpritRead) -> str | None:
    """Why a culprit is a range and not one commit: the commits before its last one were not
    measured (with the failure the job recorded there, such as a build or compile error)."""
    shas = job.revision_shas
    if c.exact or c.first_sha not in shas or c.last_sha not in shas:
        return None
    lo, hi = shas.index(c.first_sha), shas.index(c.last_sha)
    words: dict[str, list[str]] = {sha: [] for sha in shas[lo:hi]}
    for f in job.outcome.failures if job.outcome else []:
        if f.sha in words and f.words not in words[f.sha]:
            words[f.sha].append(f.words)
    if not words:
        return None
    parts = [f"{short(sha)} {', '.join(w) if w else 'not measured'}" for sha, w in words.items()]
    return f"a range, not one commit: the step is at {short(c.last_sha)} or before it at " + "; ".join(parts)


def _culprit_block(job: JobRead, c: CulpritRead, width: int) -> list[Text]:
    title = f"{where(c)}  {pr_label(c)}  " if c.pr_number else f"{where(c)}  "
    subject = textwrap.shorten(c.subject or "", max(20, width - len(title)), placeholder=" ...")
    lines = [Text(title + subject, "bold")]
    note = range_note(job, c)
    if note:
        lines += [Text("  " + part) for part in textwrap.wrap(note, width - 2)]
    effects = moved_effects(job, c)
    every = [*effects, *(o.case for o in (job.outcome.cases if job.outcome else []) if o.case not in effects)]
    labels = case_labels(every, width - 40)  # the labels of the case list below
    case_width = max((len(label) for label in labels.values()), default=0)
    for case, e in effects.items():
        regression = is_regression(job, c, case, e)
        word = "regression" if regression else "improvement"
        line = Text(f"  {labels[case].ljust(case_width)}  ")
        line.append(f"{step_text(e)} {word}", STYLE[word])
        decided, absolute = before_after(job, e)
        lines += [line, Text(f"      {decided_on(job)} {decided}; {absolute}")]
    return lines + why_block(c, width)


def why_block(c: CulpritRead, width: int) -> list[Text]:
    """A culprit's evidence (a job run with --evidence): one line per kind, then where the rest is."""
    if not c.why:
        return []
    lines = [Text("  why:", "bold")]
    for line in c.why:
        style = "dim" if line.startswith(("no ", "partial ")) else ""
        lines += [Text(part, style) for part in textwrap.wrap(line, width, initial_indent="    ",
                                                              subsequent_indent="      ")]
    if c.evidence_url:
        lines.append(Text(f"    evidence: {c.evidence_url}", "dim"))
    return lines


def _wide_table(job: JobRead) -> list[Text]:
    header = ["revision", "PR", "subject", "case", f"{decided_on(job)} before -> after", "metric before -> after",
              "step [95% CI]"]
    rows = []
    for c in job.culprits:
        if c.kind != "performance":
            continue
        for i, (case, e) in enumerate(moved_effects(job, c).items()):
            head = [where(c), pr_label(c), c.subject or ""] if i == 0 else ["", "", ""]
            word = "regression" if is_regression(job, c, case, e) else "improvement"
            rows.append([*head, case, *before_after(job, e), f"{step_text(e)} {word}"])
    return [Text(line, STYLE["regression"] if line.endswith(" regression") else
                 STYLE["improvement"] if line.endswith(" improvement") else "") for line in _table(header, rows)]


def _indent_error(error: str | None, width: int) -> list[Text]:
    if not error:
        return []
    tail = error.strip().splitlines()[-ERROR_LINES:]
    return [Text("      " + textwrap.shorten(line, width - 6, placeholder=" ...") if len(line) > width - 6
                 else "      " + line, "dim") for line in tail]


def history_path(repository: str, case: str) -> str:
    """The dashboard chart of one case over the repository's measured history (its tracked
    branches measure every pushed commit, so a step fixed between a bisect's ends shows there)."""
    return f"/dashboard/repositories/{quote(repository)}?case={quote(case)}"


def _case_outcomes(job: JobRead, width: int, wide: bool = False) -> list[Text]:
    cases = job.outcome.cases if job.outcome else []
    if not cases:
        return []
    names = [c.case for c in cases]
    labels = {n: n for n in names} if wide else case_labels(names, width - 36)
    name_width = max(len(label) for label in labels.values())
    lines = [Text("Cases:")]
    for c in cases:
        line = Text(f"  {labels[c.case].ljust(name_width)}  ")
        line.append(c.outcome.ljust(12), STYLE[c.outcome])
        if c.steps:
            moves = ", ".join(f"{pct(s.rel)} at {short(s.last_sha)}" for s in c.steps)
            detail = moves + (f"; {c.reason}" if c.reason else "")
        else:
            detail = c.reason or ""
        lines.append(line)
        lines += [Text("      " + part) for part in textwrap.wrap(detail, width - 6)]
        if c.unseen:
            lines.append(Text(f"      history: {history_path(job.repository, c.case)}", "dim"))
        lines += _indent_error(c.error, width)
    return lines


def report_lines(job: JobRead, *, width: int = 100, wide: bool = False) -> list[Text]:
    p = job.progress
    lines = [Text(f"job {job.id} ({job.kind}, {job.status}): {ref(job.spec.good)}..{ref(job.spec.bad)} "
                  f"in {job.repository}"),
             Text(f"{p.get('revisions', '?')} revisions, {p.get('measured', 0)} measured, {p.get('trials', 0)} "
                  f"trials, {p.get('rounds', 0)} rounds; minimum effect {job.spec.min_effect * 100:.1f}% "
                  f"of the {decided_on(job)}"),
             headline(job), *toolchain_lines(job)]
    if job.outcome and job.outcome.warning:
        lines += [Text(part, STYLE["warning"]) for part in textwrap.wrap("warning: " + job.outcome.warning, width)]
    perf = [c for c in job.culprits if c.kind == "performance"]
    if perf:
        lines += [Text(""), Text(f"Culprits (step = change of the {decided_on(job)}, 95% CI; "
                                 "cases that did not move are left out):")]
        if wide:
            lines += _wide_table(job)
            lines += [Text(f"{where(c)}: {note}") for c in perf if (note := range_note(job, c))]
            for c in perf:
                lines += [Text(f"{where(c)}:")] + why_block(c, width) if c.why else []
        else:
            for c in perf:
                lines += _culprit_block(job, c, width)
    elif job.outcome and job.outcome.verdict == "unchanged":
        lines += [Text("")] + [Text(part) for part in textwrap.wrap(no_step_sentence(job), width)]
    wrong = [c for c in job.culprits if c.kind == "correctness"]
    if wrong:
        lines += [Text(""), Text("Correctness (wrong results at full speed is a failure, not a speed-up):")]
        for c in wrong:
            fixed = f"fixed at {short(c.fixed_sha)}" if c.fixed_sha else "not fixed in this range"
            lines.append(Text(textwrap.shorten(f"  {short(c.first_sha)} {pr_label(c)} {c.subject or ''}: first wrong "
                                               f"results; {fixed}", width, placeholder=" ..."), STYLE["regression"]))
            for case, w in c.wrong_cases.items():  # the cases that failed accuracy; the others kept their timing
                vs = f" vs tolerance {w.tolerance:.3g}" if w.tolerance is not None else ""
                err = f": error {w.error:.3g}{vs}" if w.error is not None else ""
                lines.append(Text(textwrap.shorten(f"    {case}{err}", width, placeholder=" ..."), STYLE["regression"]))
    shapes = job.outcome.shapes if job.outcome else []
    if shapes:
        lines += [Text(""), Text("Spread and shape (the calls' spread inside a trial; never the control's):")]
        lines += [Text(part, STYLE["regression"]) for s in shapes
                  for part in textwrap.wrap(shape_sentence(s), width, initial_indent="  ", subsequent_indent="    ")]
    case_lines = _case_outcomes(job, width, wide)
    if case_lines:
        lines += [Text(""), *case_lines]
    lines += attribution_lines(job)
    lines += descent_report_lines(job)
    if job.error and not case_lines:
        lines += [Text(""), Text(f"error: {job.error}", STYLE["failed"])]
    return lines


def shape_sentence(s: ShapeRead) -> str:
    """One line for a noisier or bimodal finding: where, the spread before and after with their
    intervals, and for a new mode its share of the calls and where it sits."""
    at = short(s.first_sha) if s.exact else f"{short(s.first_sha)}..{short(s.last_sha)}"
    spread = (f"spread {s.before:.1%} [{s.before_ci[0]:.1%}, {s.before_ci[1]:.1%}] -> {s.after:.1%} "
              f"[{s.after_ci[0]:.1%}, {s.after_ci[1]:.1%}], x{s.ratio:.2f} [{s.ratio_ci[0]:.2f}, {s.ratio_ci[1]:.2f}]")
    if s.kind == "bimodal" and s.mode_share is not None and s.mode_location is not None:
        return (f"{s.case}: bimodal from {at}: a new mode carries {s.mode_share:.0%} of the calls at "
                f"{s.mode_location:+.0%} of the main mode's time; {spread}")
    return f"{s.case}: noisier from {at}: {spread}"


def descent_report_lines(job: JobRead) -> list[Text]:
    """A child's parent, and a parent's descents into the dependency bumps of its culprits."""
    lines: list[Text] = []
    found = job.spec.descent if job.kind == "bisect" else None
    if found is not None:
        lines += [Text(""), Text(f"Inside the bump of {found.dependency} {found.old_pin[:7]}..{found.new_pin[:7]} by "
                                 f"{found.label or found.culprit_sha[:7]} of job {found.parent_job_id} "
                                 f"(level {found.level}; the host stays at {found.host_sha[:10]})")]
    if job.descent_lines or job.descents:
        heading = "When the culprit is a bump (descended into the dependency):"
        if toolchain_of(job.spec):
            heading = "When the culprit is a version (descended into the package's commits between it and the one before):"
        lines += [Text(""), Text(heading)]
        lines += [Text(f"  {line}") for line in job.descent_lines]
        lines += [Text(f"  child job {d.job_id} ({d.status}): {d.dependency} "
                       + (f"{d.old} -> {d.new}" if d.toolchain else f"{d.old[:7]}..{d.new[:7]}"))
                  for d in job.descents if d.job_id is not None]
    return lines


def culprit_table(job: JobRead, *, width: int = 100, wide: bool = False) -> str:
    """The report as plain text (no colour)."""
    return "\n".join(line.plain.rstrip() for line in report_lines(job, width=width, wide=wide))
