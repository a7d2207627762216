"""The pull-request comments, rendered from a JobRead alone (pure: no database, no network).

- `render_job`: a job's report (what a compare job posts on its PR): a verdict headline with the
  counts, the regressions and the improvements (each worded as such), the failed benchmarks with
  their error, the inconclusive ones with why, the unchanged cases collapsed, the noise warning,
  then device, toolchain and threshold, and a link to the job page.
- `render_culprit_comment`: on a PR that a bisect named as an exact culprit, its steps.

With a public URL, every case named links to its chart on the dashboard (the step in context),
and the footer to the job's page.
"""

from __future__ import annotations

from perfbisect.service.job_spec import CompareSpec, JobSpec
from perfbisect.service.jobs.schemas import CulpritRead, JobRead
from perfbisect.service.reports.attribution import markdown_lines as attribution_markdown
from perfbisect.service.reports.culprits import (
    before_after,
    toolchain_lines,
    decided_on,
    gap_clause,
    history_path,
    is_regression,
    moved_effects,
    ref,
    shape_sentence,
    step_text,
    where,
)

ICON = {"regressed": ":red_circle:", "improved": ":green_circle:", "unchanged": ":white_check_mark:",
        "inconclusive": ":grey_question:", "failed": ":x:"}
WORDS = {"regressed": "regression", "improved": "improvement", "unchanged": "no change above the threshold",
         "inconclusive": "inconclusive", "failed": "could not measure"}
ERROR_LINES = 6


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _links(job: JobRead, public_url: str | None) -> str:
    if not public_url:
        return f"job {job.id}"
    return f"[job {job.id}]({public_url.rstrip('/')}/dashboard/jobs/{job.id})"


def _case(job: JobRead, case: str, public_url: str | None) -> str:
    """The case's name, linked to its chart when there is a dashboard to link to."""
    if not public_url:
        return f"`{case}`"
    return f"[`{case}`]({public_url.rstrip('/')}{history_path(job.repository, case)})"


def _environment(job: JobRead) -> str:
    env = (job.outcome.environment if job.outcome else None) or {}
    device = env.get("name") or job.spec.device_class
    extras = [f"driver {env['driver']}" if env.get("driver") else "", f"CUDA {env['cuda']}" if env.get("cuda") else ""]
    device += f" ({', '.join(e for e in extras if e)})" if any(extras) else ""
    tools = [f"{k} {env[k]}" for k in ("torch", "triton", "python") if env.get(k)]
    return " · ".join([f"device {device}", *tools])


def _footer(job: JobRead, public_url: str | None) -> str:
    p = job.progress
    return (f"<sub>{_environment(job)} · threshold: minimum effect {job.spec.min_effect * 100:.1f}% of the "
            f"{decided_on(job)} · {p.get('trials', 0)} trials over {p.get('measured', 0)} revisions, cold caches, "
            f"control timed in the same process · {_links(job, public_url)}</sub>")


def _step_tables(job: JobRead, culprits: list[CulpritRead], public_url: str | None, *,
                 with_revision: bool) -> list[str]:
    """A Regressions table and an Improvements table, each only when it has rows."""
    head = ["revision", "PR"] if with_revision else []
    header = [*head, "case", f"{decided_on(job)} before → after", "metric before → after", "step [95% CI]"]
    groups: dict[bool, list[list[str]]] = {True: [], False: []}
    for c in culprits:
        if c.kind != "performance":
            continue
        for case, e in moved_effects(job, c).items():
            decided, absolute = before_after(job, e)
            revision = [f"`{where(c)}`", f"#{c.pr_number}" if c.pr_number else ""] if with_revision else []
            row = [*revision, _case(job, case, public_url), decided.replace("->", "→"), absolute.replace("->", "→"), step_text(e)]
            groups[is_regression(job, c, case, e)].append(row)
    out: list[str] = []
    for regression, title in ((True, "Regressions"), (False, "Improvements")):
        if groups[regression]:
            out += ["", f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            out += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in groups[regression]]
    return out + _why_lines(job, culprits, public_url)


def _why_lines(job: JobRead, culprits: list[CulpritRead], public_url: str | None) -> list[str]:
    """One line per culprit run with evidence: why it got slower, and a link to the evidence."""
    from perfbisect.service.alerts.render import why_markdown  # alerts' renderer imports reports at module level

    lines = [why_markdown(c.why, job.id, c.last_sha, public_url) for c in culprits if c.kind == "performance"]
    found = [line for line in lines if line]
    return ["", *found] if found else []


def _error_block(error: str | None) -> list[str]:
    if not error:
        return []
    tail = "\n".join(error.strip().splitlines()[-ERROR_LINES:]).replace("```", "'''")
    return ["  ```", *("  " + line for line in tail.splitlines()), "  ```"]


def _case_lists(job: JobRead, public_url: str | None) -> list[str]:
    cases = job.outcome.cases if job.outcome else []
    out: list[str] = []
    failed = [c for c in cases if c.outcome == "failed"]
    if failed:
        out += ["", f"**Failed benchmarks** ({len(failed)})", ""]
        for c in failed:
            at = f" (`{c.failed_at[:10]}`)" if c.failed_at else ""
            out += [f"- {_case(job, c.case, public_url)}: {c.reason}{at}", *_error_block(c.error)]
    noted = [c for c in cases if c.steps and c.reason]  # a step found although an end failed
    if noted:
        out += ["", "**Also**", ""] + [f"- {_case(job, c.case, public_url)}: {c.reason}" for c in noted]
    inconclusive = [c for c in cases if c.outcome == "inconclusive"]
    if inconclusive:
        out += ["", f"**Inconclusive** ({len(inconclusive)})", ""]
        out += [f"- {_case(job, c.case, public_url)}: {c.reason}" for c in inconclusive]
    unchanged = [c for c in cases if c.outcome == "unchanged"]
    if unchanged:
        out += ["", f"<details><summary>{len(unchanged)} unchanged case(s)</summary>", "",
                "| case | end-to-end step [95% CI] | ruled out |", "|---|---|---|"]
        for c in unchanged:
            ci = f"[{c.ci[0] * 100:+.1f}, {c.ci[1] * 100:+.1f}]" if c.ci else "-"
            bound = f"any step beyond ±{c.bound * 100:.1f}%" if c.bound is not None else "-"
            out.append(f"| {_cell(_case(job, c.case, public_url))} | {ci} | {bound} |")
        out += ["", "</details>"]
    if unchanged and (clause := gap_clause(job, "`")) is not None:
        where = (", ".join(f"[{c.case}]({public_url.rstrip('/')}{history_path(job.repository, c.case)})"
                           for c in unchanged) if public_url else "the dashboard's history of each case")
        out += ["", f"Unchanged covers what was measured: {clause}. See also the tracked history: {where}."]
    return out


def base_note(spec: JobSpec) -> str | None:
    """Which base a compare measured the head against, when it asked for the merge base (a pull
    request's compare): None for a compare of two given revisions."""
    if not isinstance(spec, CompareSpec) or not spec.merge_base or not spec.good_sha:
        return None
    merge_base, tip = spec.good_sha[:10], spec.base_tip_sha
    if not tip:
        return f"Base: the merge base `{merge_base}` of the head and its base branch (the branch's tip)."
    return (f"Base: the merge base `{merge_base}` of the head and its base branch, not the branch's tip "
            f"`{str(tip)[:10]}`: the steps the base made since the head branched off are not the head's.")


def _headline(job: JobRead) -> str:
    if job.outcome is None:
        return f"### perfbisect: {job.kind} {job.status}"
    o = job.outcome
    counts = ", ".join(f"{o.counts.get(k, 0)} {k}" for k in ("regressed", "improved", "unchanged", "failed"))
    if o.counts.get("inconclusive"):
        counts += f", {o.counts['inconclusive']} inconclusive"
    return f"### perfbisect: {ICON[o.verdict]} {WORDS[o.verdict]} ({counts})"


def render_job(job: JobRead, public_url: str | None = None) -> str:
    """The job's report as Markdown: headline, step tables, failed/inconclusive/unchanged cases."""
    kind = "Compared" if job.kind == "compare" else "Bisected"
    merge_base = isinstance(job.spec, CompareSpec) and job.spec.merge_base
    good = job.spec.good_sha if merge_base else job.spec.good  # the base measured
    out = [_headline(job), "",
           f"{kind} `{ref(good)}`..`{ref(job.spec.bad)}` in **{job.repository}** ({job.status}); "
           f"step = relative change of the {decided_on(job)}, 95% CI."]
    if (note := base_note(job.spec)) is not None:
        out += ["", note]
    out += [line for text in toolchain_lines(job) for line in ("", str(text))]  # a toolchain bisect's versions
    out += _step_tables(job, job.culprits, public_url, with_revision=job.kind != "compare")
    for c in job.culprits:
        if c.kind == "correctness":
            out += ["", f":warning: wrong results from `{c.first_sha[:10]}`"
                    + (f" #{c.pr_number}" if c.pr_number else "")
                    + (f", fixed at `{c.fixed_sha[:10]}`" if c.fixed_sha else ", not fixed in this range")
                    + " (a fast kernel that computes the wrong thing is a failure, not a speed-up)"]
    for shape in job.outcome.shapes if job.outcome else []:
        out += ["", f":chart_with_upwards_trend: {_cell(shape_sentence(shape))}"]
    out += _case_lists(job, public_url)
    out += attribution_markdown(job)
    if job.outcome and job.outcome.warning:
        out += ["", f"> :warning: {job.outcome.warning}"]
    if job.error and not (job.outcome and job.outcome.cases):
        out += ["", f"**Error:** {job.error}"]
    out += ["", _footer(job, public_url)]
    return "\n".join(out)


def _direction(job: JobRead, culprits: list[CulpritRead]) -> str:
    kinds = {is_regression(job, c, case, e) for c in culprits for case, e in moved_effects(job, c).items()}
    if kinds == {True}:
        return "a performance regression"
    if kinds == {False}:
        return "a performance improvement"
    return "performance steps (regressions and improvements)"


def render_culprit_comment(job: JobRead, culprits: list[CulpritRead], public_url: str | None = None) -> str:
    """On a PR a bisect named as an exact culprit: what moved, worded by direction."""
    shas = ", ".join(f"`{c.last_sha[:10]}`" for c in culprits)
    out = [f"### perfbisect: this pull request caused {_direction(job, culprits)}", "",
           f"Bisecting `{ref(job.spec.good)}..{ref(job.spec.bad)}` in **{job.repository}** found the step at "
           f"{shas}, from this pull request. Step = relative change of the {decided_on(job)}, 95% CI:"]
    out += _step_tables(job, culprits, public_url, with_revision=True)
    out += attribution_markdown(job)
    out += ["", _footer(job, public_url)]
    return "\n".join(out)

