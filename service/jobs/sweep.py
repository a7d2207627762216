"""The correctness sweep (the spec's `check_accuracy`): one accuracy-only trial (no timing loop) at
every revision of the range, queued with the search's first round and run side by side with it.

The search itself meets wrong results only where it happens to build; the sweep checks every
revision, so each run of wrong-results revisions is named from its first commit to the one that
fixes it. Sweep trials never enter the timing comparison and do not hold up a planning round;
the job finishes once both the search and the sweep are done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from perfbisect.service.bisect import CorrectnessFinding, Observation, Plan, RevisionState
from perfbisect.service.bisect.probes import correctness
from perfbisect.service.models import Job, Revision, Trial, TrialStatus

CASE_WRONG = "wrong_results"


def new_trials(job: Job, trials: Sequence[Trial], plan: Plan, revisions: dict[str, Revision]) -> list[Trial]:
    """On the first round of a job that asks for it: a sweep trial at every revision that the
    round does not time already (a timed trial checks accuracy too)."""
    if not job.spec.check_accuracy or trials:
        return []
    timed = {r.revision for r in plan.requests}
    return [Trial(job_id=job.id, revision_id=revisions[sha].id, device_class=job.spec.device_class,
                  accuracy_only=True)
            for i, sha in enumerate(job.revision_shas) if i not in timed]


def states(trials: Sequence[Trial], shas: Sequence[str]) -> dict[int, Observation]:
    """What the finished trials (sweep and timed) say of each revision's accuracy: its state and
    the cases that were wrong there."""
    index = {sha: i for i, sha in enumerate(shas)}
    seen: dict[int, set[RevisionState]] = defaultdict(set)
    wrong: dict[int, set[str]] = defaultdict(set)
    for trial in trials:
        if not trial.status.finished or trial.status == TrialStatus.cancelled:
            continue
        if trial.status == TrialStatus.worker_error:  # says nothing of the revision
            continue
        i = index[trial.revision.sha]
        if trial.status != TrialStatus.ok:
            seen[i].add(RevisionState.unbuildable)
            continue
        wrong[i] |= {m.case.name for m in trial.measurements if m.status == CASE_WRONG}
        seen[i].add(RevisionState.ok)
    precedence = (RevisionState.ok, RevisionState.unbuildable)
    return {i: Observation(next(s for s in precedence if s in found), wrong=frozenset(wrong.get(i, ())))
            for i, found in seen.items()}


def findings(trials: Sequence[Trial], shas: Sequence[str]) -> tuple[CorrectnessFinding, ...]:
    """Each run of wrong-results revisions, from its first one to the next that passes (the
    planner's own rule, here over every revision instead of those the search built)."""
    return tuple(correctness(len(shas), states(trials, shas))[0])


def in_flight(trials: Sequence[Trial]) -> int:
    return sum(t.accuracy_only and not t.status.finished for t in trials)
