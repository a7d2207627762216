"""A culprit's evidence (issue 43): read the job's profiled trials at the culprit's two ends and
diff what they ran and compiled (diff.py). Reads only; never commits.

    evidence = evidence_of(session, job_id, sha)   # CulpritEvidence; NotFound for no such culprit

Every missing kind of evidence is a section with `available: false` and its reason, never an
error: a job run without --evidence, a profiled trial that failed, a case with no Triton kernel,
a JIT cache without IR files, a profiler that failed.
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from perfbisect.service.bisect.model import stored_step_moved
from perfbisect.service.errors import NotFound
from perfbisect.service.evidence import diff, repository
from perfbisect.service.evidence.schemas import (
    AutotuneSection,
    CaseKernels,
    CompiledSection,
    CulpritEvidence,
    EnvironmentSection,
    KernelSection,
)
from perfbisect.service.evidence.summary import why_lines
from perfbisect.service.hunks.schemas import HunkEvidence
from perfbisect.service.hunks.service import hunk_evidence
from perfbisect.service.job_spec import BisectSpec, CompareSpec
from perfbisect.service.models import Culprit, CulpritKind, Job, Trial, TrialStatus


def wants_evidence(job: Job) -> bool:
    """Whether the job was submitted with --evidence (bisects and compares only)."""
    return isinstance(job.spec, (BisectSpec, CompareSpec)) and job.spec.evidence


def find_culprit(job: Job, sha: str) -> Culprit:
    """The job's performance culprit whose first or last commit is `sha` (or starts with it, at
    least 7 characters). Raises NotFound."""
    sha = sha.lower()
    for culprit in job.culprits:
        if culprit.kind == CulpritKind.performance and len(sha) >= 7 and (
                culprit.first_sha.startswith(sha) or culprit.last_sha.startswith(sha)):
            return culprit
    raise NotFound(f"job {job.id} has no performance culprit {sha}")


def profiled_ends(job: Job, culprit: Culprit, profiled: list[Trial]) -> tuple[Trial | None, Trial | None]:
    """The profiled trials at the culprit's ends: the nearest before its first commit (the
    parent side) and the one at its last commit (the newest of each, when retried)."""
    index = {sha: i for i, sha in enumerate(job.revision_shas)}
    first = index.get(culprit.first_sha, 0)
    before = [t for t in profiled if index.get(t.revision.sha, -1) < first]
    after = [t for t in profiled if t.revision.sha == culprit.last_sha]
    pick = max(before, key=lambda t: (index[t.revision.sha], t.id), default=None)
    return pick, max(after, key=lambda t: t.id, default=None)


def _missing_trials(job: Job, before: Trial | None, after: Trial | None) -> str | None:
    """Why the profiled trials give nothing to compare, or None when both ran."""
    if not wants_evidence(job):
        return "the job ran without evidence (submit with --evidence, or \"evidence\": true)"
    if before is None or after is None:
        return "no profiled trial at one end of the culprit (the job finished before they ran)"
    for side, trial in (("before", before), ("after", after)):
        if not trial.status.finished:
            return f"the profiled trial {side} the culprit is still {trial.status.value}"
        if trial.status != TrialStatus.ok:
            # its kind only: the log text of repository code is its submitter's (service/jobs/logs.py)
            return f"the profiled trial {side} the culprit failed ({trial.status.value}; its log is in the job's trials)"
    return None


def moved_cases(job: Job, culprit: Culprit) -> list[str]:
    """The cases that moved at the culprit (the reports' rule, `stored_step_moved`), all of its
    cases when none did: the kernel tables of the others would show only the profiler's noise."""
    effects = culprit.effects or {}
    return sorted(c for c, e in effects.items() if stored_step_moved(e, job.spec.min_effect)) or sorted(effects)


def kernel_section(cases: list[str], before: dict, after: dict) -> KernelSection:
    """Per case of the culprit, the profiler's tables at both ends diffed."""
    out = []
    for case in cases:
        b = ((before.get("cases") or {}).get(case) or {})
        a = ((after.get("cases") or {}).get(case) or {})
        bp, ap = b.get("profile") or {}, a.get("profile") or {}
        reason = _case_reason(b, a, bp, ap)
        table = diff.kernel_diff(bp.get("kernels") or [], ap.get("kernels") or [])
        out.append(CaseKernels(case=case, reason=reason, **table))
    usable = [c for c in out if c.rows]
    if not usable:
        reasons = sorted({c.reason for c in out if c.reason})
        return KernelSection(available=False, reason="; ".join(reasons) or "the profiler recorded nothing", cases=out)
    return KernelSection(available=True, cases=out)


def _case_reason(b: dict, a: dict, bp: dict, ap: dict) -> str | None:
    for side, entry, prof in (("before", b, bp), ("after", a, ap)):
        if not entry:
            return f"the case was not profiled {side} the culprit"
        if entry.get("status") not in (None, "ok"):
            return f"the case failed {side} the culprit ({entry.get('status')})"
        if not prof.get("kernels"):
            return f"{side} the culprit: {prof.get('note') or 'the profiler recorded nothing'}"
    return None


def sections(cases: list[str], before: dict, after: dict) -> tuple[KernelSection, CompiledSection, AutotuneSection]:
    """The kernel, compiled-code and autotuner sections from two profiled trials' stored findings
    (trials.evidence: service/trials/service.py:profiled_evidence); `cases` default to theirs."""
    cases = cases or sorted(set(before.get("cases") or {}) | set(after.get("cases") or {}))
    compiled = diff.compiled_diff(before.get("compiled") or {}, after.get("compiled") or {},
                                  before.get("live"), after.get("live"))
    return (kernel_section(cases, before, after), CompiledSection(**compiled),
            AutotuneSection(**diff.autotune_diff(before.get("live"), after.get("live"))))


def build_evidence(job: Job, culprit: Culprit, before: Trial | None, after: Trial | None,
                   compared: tuple[dict | None, dict | None], hunks: HunkEvidence) -> CulpritEvidence:
    """The evidence document from the profiled trials' stored findings and the device provenance
    of the compared (timing) trials at both ends."""
    env = EnvironmentSection(**diff.environment_diff(*compared))
    missing = _missing_trials(job, before, after)
    if missing:
        kernels, compiled = KernelSection(available=False, reason=missing), CompiledSection(available=False, reason=missing)
        autotune = AutotuneSection(available=False, reason=missing)
    else:
        kernels, compiled, autotune = sections(moved_cases(job, culprit), before.evidence or {}, after.evidence or {})
    evidence = CulpritEvidence(
        job_id=job.id, first_sha=culprit.first_sha, last_sha=culprit.last_sha,
        before_sha=before.revision.sha if before else None, after_sha=after.revision.sha if after else None,
        summary=[], hunks=hunks, kernels=kernels, compiled=compiled, autotune=autotune, environment=env)
    evidence.summary = why_lines(evidence)
    return evidence


def evidence_of(session: Session, job_id: int, sha: str) -> CulpritEvidence:
    """The evidence of job `job_id`'s culprit `sha`. Raises NotFound (no job, no such culprit)."""
    job = repository.job_with_culprits(session, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    culprit = find_culprit(job, sha)
    before, after = profiled_ends(job, culprit, list(repository.profiled_trials(session, job.id)))
    compared = repository.compared_provenance(session, job, culprit, before, after)
    return build_evidence(job, culprit, before, after, compared, hunk_evidence(session, job.id, culprit.last_sha))


def why_of(session: Session, culprit: Culprit | None) -> list[str]:
    """A culprit's 'why' lines where its job ran with evidence (the alert page's and the alert
    bot's line); [] otherwise."""
    if culprit is None or culprit.kind != CulpritKind.performance:
        return []
    job = repository.job_with_culprits(session, culprit.job_id)
    if job is None or not job.status.finished or not wants_evidence(job):
        return []
    return evidence_of(session, job.id, culprit.last_sha).summary


def evidence_of_job(session: Session, job_id: int) -> dict[str, CulpritEvidence]:
    """Every performance culprit's evidence, by its last sha (for reports); empty for a job
    that ran without --evidence."""
    job = repository.job_with_culprits(session, job_id)
    if job is None or not wants_evidence(job):
        return {}
    return {c.last_sha: evidence_of(session, job_id, c.last_sha)
            for c in job.culprits if c.kind == CulpritKind.performance}
