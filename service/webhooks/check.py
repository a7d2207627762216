"""The merge gate of a pull request's compare job: one GitHub check conclusion from the job's
culprits. Pure (a JobRead in, a CheckVerdict out).

- failure: wrong results, or a case whose step passed the job's threshold (95% interval clear of
  zero and at least min_effect) and went down;
- neutral: the job did not finish cleanly (failed or cancelled): nothing can be concluded;
- success: otherwise (no step, or only improvements).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfbisect.service.jobs.schemas import JobRead

CHECK_NAME = "perfbisect"
# A commit status has no "neutral": an inconclusive job must not block a merge, so it reads success
# with a description that says it was inconclusive.
STATUS_STATE = {"failure": "failure", "success": "success", "neutral": "success"}


@dataclass(frozen=True)
class CheckVerdict:
    conclusion: str  # "failure" | "success" | "neutral"
    title: str
    summary: str


def _passed(rel: float, ci: tuple[float, float], min_effect: float) -> bool:
    return (ci[0] > 0 or ci[1] < 0) and abs(rel) >= min_effect


def check_verdict(job: JobRead) -> CheckVerdict:
    """The conclusion, a one-line title and a Markdown summary for the job's head commit."""
    min_effect = float(job.spec.get("min_effect") or 0.0)
    if job.status in ("failed", "cancelled"):
        why = f": {job.error}" if job.error else ""
        return CheckVerdict("neutral", f"inconclusive: the job {job.status}", f"Job {job.id} {job.status}{why}.")
    regressed, improved = [], []
    for culprit in job.culprits:
        for case, effect in culprit.effects.items():
            if culprit.kind == "performance" and _passed(effect.rel, effect.ci, min_effect):
                (regressed if effect.rel < 0 else improved).append(f"{case} {effect.rel * 100:+.1f}%")
    wrong = [c for c in job.culprits if c.kind == "correctness"]
    threshold = f"threshold {min_effect * 100:.1f}%"
    lines = [f"- regressed: {r}" for r in regressed] + [f"- improved: {i}" for i in improved]
    lines += [f"- wrong results from `{c.first_sha[:10]}`" for c in wrong]
    summary = "\n".join(lines) or f"No case moved by more than the {threshold}."
    if wrong or regressed:
        parts = ([f"{len(regressed)} case{'s' if len(regressed) != 1 else ''} regressed"] if regressed else [])
        parts += ["wrong results"] if wrong else []
        return CheckVerdict("failure", ", ".join(parts) + f" ({threshold})", summary)
    title = f"{len(improved)} improved, none regressed" if improved else "no performance change"
    return CheckVerdict("success", f"{title} ({threshold})", summary)
