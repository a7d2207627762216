"""Loading a tracked branch's case histories for the pure detection (service/alerts/grouping):
the branch's first-parent commits from the mirror, and per case the median decision value of
every head measured with today's fingerprint on the branch's device class, whatever job
(track, bisect or compare) measured it; and per case the heads' per-call samples, for the spread
and mode steps (`call_heads`, issue 46). Reads only."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from perfbisect.gitrepo import GitError
from perfbisect.service.alerts import grouping
from perfbisect.service.alerts.grouping import CaseHistory, Remeasure
from perfbisect.service.alerts.spread import Head
from perfbisect.service.models import Case, Measurement, TrackedBranch
from perfbisect.service.repos import service as repos
from perfbisect.service.settings import get_settings
from perfbisect.service.tracking import repository as tracking_repo
from perfbisect.service.tracking.service import first_parent_shas
from perfbisect.service.trials.repository import samples_of


@dataclass(frozen=True)
class BranchHistory:
    shas: list[str]  # first-parent, oldest first
    cases: list[CaseHistory]
    case_rows: dict[str, Case]
    index: dict[str, int] = field(default_factory=dict)  # sha -> position in shas
    broken: dict[int, str] = field(default_factory=dict)  # position -> why the head failed (build_error, import_error)

    def position(self, sha: str | None) -> int | None:
        """The commit's position on the branch; None when it is not (or no longer) on it."""
        return self.index.get(sha) if sha else None

    def broken_steps(self) -> list[grouping.Step]:
        """Where the branch's heads start or stop failing to build or import."""
        working = {p for h in self.cases for p in (*h.positions, *h.wrong)}
        return grouping.broken_steps(sorted(working), sorted(set(self.broken) - working))


def branch_shas(tracked: TrackedBranch) -> list[str]:
    """The branch's first-parent history up to its last run's head (empty when it is gone)."""
    if tracked.last_sha is None:
        return []
    mirror = repos.mirror_of(tracked.repository)
    try:
        return first_parent_shas(mirror, tracked.last_sha, get_settings().max_range)
    except GitError:
        return []


def _value(tracked: TrackedBranch, m: Measurement) -> float | None:
    """The measurement's decision value on this branch: the ratio to the control, or the raw metric."""
    return m.ratio if tracked.metric == "ratio" else m.value


def load(session: Session, tracked: TrackedBranch) -> BranchHistory:
    shas = branch_shas(tracked)
    cases = tracking_repo.cases_of(session, tracked.repository_id, tracked.cases)
    fingerprint = tracking_repo.current_fingerprint(session, tracked.repository_id, tracked.device_class)
    index = {sha: i for i, sha in enumerate(shas)}
    broken = {index[sha]: why for sha, why in tracking_repo.broken_heads(session, tracked.id, shas).items()}
    if not shas or not cases or fingerprint is None:
        return BranchHistory(shas, [], cases, index, broken)
    values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    wrong: dict[int, set[str]] = defaultdict(set)
    higher: dict[int, bool] = {}
    rows = tracking_repo.history_rows(session, tracked.repository_id, tracked.device_class, fingerprint,
                                      [c.id for c in cases.values()], shas)
    for sha, case_id, m in rows:
        value = _value(tracked, m)
        if m.status == "wrong_results":
            wrong[case_id].add(sha)
        elif m.status == "ok" and value is not None and value > 0:
            values[case_id][sha].append(value)
            higher[case_id] = True if tracked.metric == "ratio" else m.higher_is_better
    histories = []
    for name, case in cases.items():
        # a head that returned wrong results in any trial is wrong, not a timing point
        ok = sorted((index[sha], statistics.median(v)) for sha, v in values[case.id].items() if sha not in wrong[case.id])
        histories.append(CaseHistory(
            case=name, positions=tuple(p for p, _ in ok), values=tuple(v for _, v in ok),
            wrong=tuple(sorted(index[sha] for sha in wrong[case.id])), higher_is_better=higher.get(case.id, True)))
    return BranchHistory(shas, histories, cases, index, broken)


def remeasures(session: Session, tracked: TrackedBranch,
               branch: BranchHistory) -> dict[tuple[int, int], Remeasure]:
    """The branch's side-by-side re-measures by the positions of their two heads; values per
    case once the job has finished."""
    out = {}
    for job, trials in tracking_repo.remeasures(session, tracked.id):
        pair = job.spec.remeasure
        before, after = branch.position(pair.before), branch.position(pair.after)
        if before is None or after is None:
            continue
        values = None
        if job.status.finished:
            values = {name: ([], []) for name in branch.case_rows}
            for trial in trials:
                for m in trial.measurements:
                    value = _value(tracked, m)
                    if m.status == "ok" and value is not None and m.case.name in values:
                        values[m.case.name][trial.revision.sha == pair.after].append(value)
        out[before, after] = Remeasure(before, after, values)
    return out


def _times(kept) -> tuple[float, ...]:
    return tuple(float(t) for t in kept or () if isinstance(t, (int, float)) and t > 0)


def call_heads(session: Session, tracked: TrackedBranch, branch: BranchHistory) -> dict[str, list[Head]]:
    """Per case, its measured ok heads (oldest first) with every trial's per-call times of the
    target and the control (service/alerts/spread), today's fingerprint only; heads whose trials
    kept no samples (pruned past the retention) are left out."""
    fingerprint = tracking_repo.current_fingerprint(session, tracked.repository_id, tracked.device_class)
    if not branch.shas or not branch.case_rows or fingerprint is None:
        return {}
    rows = [(sha, case_id, m) for sha, case_id, m in tracking_repo.history_rows(
        session, tracked.repository_id, tracked.device_class, fingerprint,
        [c.id for c in branch.case_rows.values()], branch.shas) if m.status == "ok"]
    raw = samples_of(session, [m.id for _, _, m in rows])
    calls: dict[int, dict[int, tuple[list, list]]] = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for sha, case_id, m in rows:
        kept = raw.get(m.id) or {}
        target, control = _times(kept.get("target_ms")), _times(kept.get("control_ms"))
        if target:
            calls[case_id][branch.index[sha]][0].append(target)
            calls[case_id][branch.index[sha]][1].append(control)
    return {name: [Head(p, tuple(t), tuple(c)) for p, (t, c) in sorted(calls[case.id].items())]
            for name, case in branch.case_rows.items() if calls.get(case.id)}
