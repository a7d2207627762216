"""The merge gate of a pull request's compare job: one GitHub check conclusion from the job's
per-case outcomes and culprits. Pure (a JobRead and the repository's gate policy in, a
CheckVerdict out).

- failure: wrong results, or a case whose step passed the job's threshold (95% interval clear of
  zero and at least min_effect) and went down;
- success: only when every case of the job was decided unchanged or improved;
- otherwise the job did not decide everything: a case inconclusive (too noisy, trial cap) reads
  `policy.inconclusive`, a case or a job that failed (or was cancelled) reads `policy.failed`;
  each is `neutral` unless the repository asks for `failure`;
- a noisier or bimodal case (issue 46) is named in the summary and the title, and fails the
  check only when the repository's `pr_policy.shapes` is `failure` (default `warn`).
The summary always names every case that was not decided, with why and the smallest step the
run could have detected on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfbisect.service.jobs.schemas import CaseOutcomeRead, JobRead
from perfbisect.service.reports.culprits import moved, shape_sentence
from perfbisect.service.reports.pr_comment import base_note

CHECK_NAME = "perfbisect"
# A commit status has no "neutral": an inconclusive job must not block a merge, so it reads success
# with a description that says it was inconclusive.
STATUS_STATE = {"failure": "failure", "success": "success", "neutral": "success"}

Conclusion = Literal["neutral", "failure"]


@dataclass(frozen=True)
class GatePolicy:
    """What an undecided compare sets on the PR (a repository's `pr_policy`)."""

    inconclusive: Conclusion = "neutral"
    failed: Conclusion = "neutral"
    shapes: Literal["warn", "failure"] = "warn"  # a noisier or bimodal case: named only, or a failure


@dataclass(frozen=True)
class CheckVerdict:
    conclusion: str  # "failure" | "success" | "neutral"
    title: str
    summary: str


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _moves(job: JobRead, min_effect: float) -> tuple[list[str], list[str], list[str]]:
    """(regressed, improved, wrong-results) lines from the job's culprits."""
    regressed, improved = [], []
    for culprit in job.culprits:
        for case, effect in culprit.effects.items():
            if culprit.kind == "performance" and moved(effect, min_effect):
                (regressed if effect.rel < 0 else improved).append(f"{case} {effect.rel * 100:+.1f}%")
    wrong = []
    for c in job.culprits:
        if c.kind == "correctness":
            cases = ", ".join(f"`{name}`" for name in c.wrong_cases) or "some case"
            wrong.append(f"{cases} from `{c.first_sha[:10]}`")
    return regressed, improved, wrong


def _undecided(job: JobRead) -> tuple[list[CaseOutcomeRead], list[CaseOutcomeRead]]:
    """(inconclusive, failed) cases. A case of the request with no outcome at all (the job
    failed before deciding it, or was cancelled) counts as failed: it was not decided."""
    outcome = job.outcome
    decided = {c.case: c for c in outcome.cases} if outcome else {}
    requested = [c.get("name") for c in job.spec.cases if c.get("name")]
    missing = [CaseOutcomeRead(case=name, outcome="failed", reason=f"not measured: the job {job.status}")
               for name in requested if name not in decided]
    if outcome is None and not requested:
        missing = [CaseOutcomeRead(case="(every case)", outcome="failed", reason=f"no outcome: the job {job.status}")]
    cases = list(decided.values())
    return ([c for c in cases if c.outcome == "inconclusive"],
            [c for c in cases if c.outcome == "failed"] + missing)


def _undecided_lines(job: JobRead, inconclusive: list[CaseOutcomeRead], failed: list[CaseOutcomeRead]) -> list[str]:
    detectable = {n.case: n.detectable for n in job.outcome.noise} if job.outcome else {}
    lines = []
    for c in inconclusive:
        step = f"; smallest detectable step {detectable[c.case] * 100:.1f}%" if c.case in detectable else ""
        lines.append(f"- not decided (inconclusive): `{c.case}`: {c.reason or 'no reason recorded'}{step}")
    for c in failed:
        lines.append(f"- not decided (failed): `{c.case}`: {c.reason or 'no reason recorded'}")
    return lines


def _largest_detectable(job: JobRead, cases: list[CaseOutcomeRead]) -> float | None:
    names = {c.case for c in cases}
    values = [n.detectable for n in job.outcome.noise if n.case in names] if job.outcome else []
    return max(values) if values else None


def check_verdict(job: JobRead, policy: GatePolicy = GatePolicy()) -> CheckVerdict:
    """The conclusion, a one-line title and a Markdown summary for the job's head commit."""
    min_effect = job.spec.min_effect
    threshold = f"threshold {min_effect * 100:.1f}%"
    regressed, improved, wrong = _moves(job, min_effect)
    inconclusive, failed = _undecided(job)
    lines = [f"- regressed: {r}" for r in regressed] + [f"- improved: {i}" for i in improved]
    lines += [f"- wrong results: {w}" for w in wrong]
    lines += _undecided_lines(job, inconclusive, failed)
    shapes = job.outcome.shapes if job.outcome else []
    lines += [f"- {s.kind}: {shape_sentence(s)}" for s in shapes]
    if job.status in ("failed", "cancelled") and job.error:
        lines.append(f"\nJob {job.id} {job.status}: {job.error}")
    summary = "\n".join(lines) or f"No case moved by more than the {threshold}."
    if (note := base_note(job.spec)) is not None:
        summary += f"\n\n{note}"
    shaped = sorted({s.case for s in shapes})
    if wrong or regressed or (shaped and policy.shapes == "failure"):
        parts = [f"{_plural(len(regressed), 'case')} regressed"] if regressed else []
        parts += [f"{_plural(len(shaped), 'case')} noisier or bimodal"] if shaped else []
        parts += ["wrong results"] if wrong else []
        parts += [f"{_plural(len(inconclusive) + len(failed), 'case')} not decided"] if inconclusive or failed else []
        return CheckVerdict("failure", ", ".join(parts) + f" ({threshold})", summary)
    if failed or job.status in ("failed", "cancelled"):
        title = f"not decided: {_plural(len(failed), 'case')} failed" if failed else f"not decided: the job {job.status}"
        if inconclusive:
            title += f", {len(inconclusive)} inconclusive"
        return CheckVerdict(policy.failed, title, summary)
    if inconclusive:
        title = f"not decided: {_plural(len(inconclusive), 'case')} inconclusive"
        if (step := _largest_detectable(job, inconclusive)) is not None:
            title += f" (smallest detectable step {step * 100:.1f}%, {threshold})"
        return CheckVerdict(policy.inconclusive, title, summary)
    title = f"{len(improved)} improved, none regressed" if improved else "no performance change"
    if shaped:  # policy "warn": named in the title, the conclusion stands
        title += f"; {_plural(len(shaped), 'case')} noisier or bimodal"
    return CheckVerdict("success", f"{title} ({threshold})", summary)
