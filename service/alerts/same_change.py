"""One alert per change. An alert is keyed by its culprit: (repository, commit, case, direction).
A step that a second tracked branch finds, in the same direction on a case of an alert whose
exact culprit lies in the step's range on that branch (a commit the range's last head has and its
head before lacks: it came by first parent or by a merge), is that alert's step: the branch
attaches to the alert (alert_branches), which raises, notifies, comments and bisects nothing
again. Later detections on that branch match the attachment, and only narrow its range. When
both branches' alerts were raised before either culprit was known, the later one's bisect folds
it into the earlier (`twin`, `fold`): no second culprit comment or notification.
Flushes, never commits; the git work is local (the mirror)."""

from __future__ import annotations

from collections.abc import Sequence

from git import GitCommandError
from sqlalchemy.orm import Session

from perfbisect.gitrepo import Mirror
from perfbisect.service.alerts import history, repository
from perfbisect.service.alerts.grouping import BROKEN, KnownAlert, StepGroup, overlap
from perfbisect.service.models import Alert, AlertBranch, AlertKind, TrackedBranch, utcnow
from perfbisect.service.repos import service as repos


def _in_range(mirror: Mirror, sha: str, before: str, after: str) -> bool:
    """Whether `after` has the commit and `before` does not (local `git merge-base --is-ancestor`)."""
    repo = mirror.ensure(fetch=False)
    try:
        return repo.is_ancestor(sha, after) and not repo.is_ancestor(sha, before)
    except GitCommandError:  # a commit the mirror lost (a force push): not this range's
        return False


def _same_cases(alert: Alert, group: StepGroup) -> bool:
    if group.kind == BROKEN:  # a broken head has no case: the commit and the kind are the key
        return True
    return bool({c.case.name for c in alert.cases} & {s.case for s in group.steps})


def find(session: Session, tracked: TrackedBranch, branch: history.BranchHistory, group: StepGroup) -> Alert | None:
    """The oldest alert of another branch of the repository that this new group is the step of."""
    before, after = branch.shas[group.before], branch.shas[group.after]
    mirror = repos.mirror_of(tracked.repository)
    for alert in repository.with_culprit(session, tracked.repository_id, AlertKind(group.kind), tracked.id):
        if _same_cases(alert, group) and _in_range(mirror, alert.culprit_last_sha, before, after):
            return alert
    return None


def attach(alert: Alert, tracked: TrackedBranch, branch: history.BranchHistory, group: StepGroup) -> None:
    alert.also_on.append(AlertBranch(tracked_branch_id=tracked.id, before_sha=branch.shas[group.before],
                                     last_sha=branch.shas[group.after]))
    alert.detections += 1
    alert.updated_at = utcnow()


def known(attached: Sequence[tuple[Alert, AlertBranch]], branch: history.BranchHistory) -> list[KnownAlert]:
    """The alerts this branch attached to, with their range on this branch (for matching only:
    their own branch fixes and narrows them)."""
    out = []
    for alert, row in attached:
        before, after = branch.position(row.before_sha), branch.position(row.last_sha)
        span = (before, after) if before is not None and after is not None else None
        out.append(KnownAlert(alert.id, alert.status.value, alert.kind.value, span))
    return out


def narrow(row: AlertBranch, branch: history.BranchHistory, group: StepGroup) -> None:
    """A later detection of the attached step on this branch: its range, narrowed."""
    before, after = branch.position(row.before_sha), branch.position(row.last_sha)
    span = (before, after) if before is not None and after is not None else None
    common = overlap(span, (group.before, group.after)) if span else (group.before, group.after)
    common = common or (group.before, group.after)
    row.before_sha, row.last_sha = branch.shas[common[0]], branch.shas[common[1]]


def twin(session: Session, alert: Alert, culprit: tuple[str, str] | None) -> Alert | None:
    """An older alert of another branch whose exact culprit is `culprit`, of the same kind and
    sharing a case with `alert`: the same change. None for a culprit range."""
    if culprit is None or culprit[0] != culprit[1]:
        return None
    names = {c.case.name for c in alert.cases}
    return next((other for other in repository.same_culprit(session, alert, culprit[1])
                 if alert.kind == AlertKind.broken or names & {c.case.name for c in other.cases}), None)


def fold(session: Session, twin_alert: Alert, alert: Alert) -> None:
    """`alert` is `twin_alert`'s change: its branch attaches to `twin_alert` with its range, and
    `alert` is deleted (its raise was told already; nothing about it is told again)."""
    if all(row.tracked_branch_id != alert.tracked_branch_id for row in twin_alert.also_on):
        twin_alert.also_on.append(AlertBranch(tracked_branch_id=alert.tracked_branch_id, before_sha=alert.before_sha,
                                              last_sha=alert.last_sha))
    twin_alert.detections += 1
    twin_alert.updated_at = utcnow()
    session.delete(alert)
    session.flush()
