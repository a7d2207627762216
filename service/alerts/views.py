"""Read models of alerts, shared by the API and the CLI."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from perfbisect.service.alerts import repository
from perfbisect.service.alerts.schemas import AlertCaseRead, AlertRead
from perfbisect.service.models import Alert
from perfbisect.service.repos.repository import revisions_by_sha


def alert_reads(session: Session, alerts: Sequence[Alert]) -> list[AlertRead]:
    branches = repository.branches(session, list({t for a in alerts
                                                  for t in (a.tracked_branch_id, *(b.tracked_branch_id for b in a.also_on))}))
    out = []
    for alert in alerts:
        tracked = branches[alert.tracked_branch_id]
        culprit = revisions_by_sha(session, tracked.repository_id, [alert.culprit_last_sha]).get(
            alert.culprit_last_sha) if alert.culprit_last_sha else None
        out.append(AlertRead(
            id=alert.id, tracked_branch_id=alert.tracked_branch_id, repository=tracked.repository.name,
            branch=tracked.branch, branches=[branches[b.tracked_branch_id].branch
                                             for b in (alert, *alert.also_on)], kind=alert.kind.value, status=alert.status.value, magnitude=alert.magnitude,
            before_sha=alert.before_sha, first_sha=alert.first_sha, last_sha=alert.last_sha,
            culprit_first_sha=alert.culprit_first_sha, culprit_last_sha=alert.culprit_last_sha,
            culprit_exact=bool(alert.culprit_last_sha) and alert.culprit_first_sha == alert.culprit_last_sha,
            culprit_subject=culprit.subject if culprit else None, culprit_pr=alert.culprit_pr,
            bisect_job_id=alert.bisect_job_id, fixed_by_id=alert.fixed_by_id, note=alert.note,
            comments=alert.comments, detections=alert.detections, created_at=alert.created_at,
            updated_at=alert.updated_at, triaged_at=alert.triaged_at,
            triaged_by=alert.triaged_by, assignee=alert.assignee, bug=alert.bug,
            cases=[AlertCaseRead(case=c.case.name, kind=c.kind.value, rel=c.rel, pvalue=c.pvalue,
                                 before=c.mean_before, after=c.mean_after) for c in alert.cases],
        ))
    return out
