from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from perfbisect import dispatch
from perfbisect.queue import CONTROL_QUEUE, DETECT_ALERTS
from perfbisect.service.alerts import repository, service, views
from perfbisect.service.alerts.schemas import AlertBulkUpdate, AlertChangeRead, AlertRead, AlertUpdate
from perfbisect.service.api.deps import SessionDep, TriagerDep, get_viewer
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import MAX_ID, NO_NUL
from perfbisect.service.models import AlertKind, AlertStatus

router = APIRouter(prefix="/api/alerts", tags=["alerts"], responses=ERROR_RESPONSES)
READ = [Depends(get_viewer)]
AlertId = Annotated[int, Path(ge=1, le=MAX_ID)]
Name = Annotated[str | None, Query(max_length=200, pattern=NO_NUL)]


@router.get("", response_model=list[AlertRead], dependencies=READ)
def list_alerts(session: SessionDep, status: AlertStatus | None = None,
                tracked_branch: int | None = Query(None, ge=1, le=MAX_ID),
                repository_name: Annotated[str | None, Query(alias="repository", max_length=100, pattern=NO_NUL)] = None,
                branch: Name = None,
                kind: AlertKind | None = None, assignee: Name = None,
                limit: int = Query(100, ge=1, le=1000)) -> list[AlertRead]:
    """Alerts, newest first: steps found on tracked branches, with their cases and culprits;
    each filter given narrows the list."""
    return views.alert_reads(session, repository.listing(
        session, status=status, tracked_id=tracked_branch, repository=repository_name, branch=branch, kind=kind,
        assignee=assignee, limit=limit))


@router.get("/{alert_id}", response_model=AlertRead, dependencies=READ)
def get_alert(session: SessionDep, alert_id: AlertId) -> AlertRead:
    return views.alert_reads(session, [service.get(session, alert_id)])[0]


@router.get("/{alert_id}/changes", response_model=list[AlertChangeRead], dependencies=READ)
def alert_changes(session: SessionDep, alert_id: AlertId) -> list[AlertChangeRead]:
    """The triage history of an alert, oldest first: who changed which field, when, from what to what."""
    service.get(session, alert_id)
    return [AlertChangeRead.model_validate(c, from_attributes=True) for c in repository.changes(session, alert_id)]


@router.patch("/{alert_id}", response_model=AlertRead)
def triage_alert(session: SessionDep, triager: TriagerDep, alert_id: AlertId, body: AlertUpdate) -> AlertRead:
    """Triage: status (new, acknowledged, investigating, invalid, fixed or expected), note,
    assignee and issue link; each change is recorded under the token's name with the reason. A
    triaged alert is not raised again; invalid or expected cancels its bisect, whose slot goes to
    the next alert, and reopening it (any other status) restarts that bisect. Needs a token with
    the triage scope (or admin)."""
    alert = service.triage(session, alert_id, body, triager.name)
    dispatch.after_commit(session, DETECT_ALERTS, alert.tracked_branch_id, queue=CONTROL_QUEUE)
    return views.alert_reads(session, [alert])[0]


@router.patch("", response_model=list[AlertRead])
def triage_alerts(session: SessionDep, triager: TriagerDep, body: AlertBulkUpdate) -> list[AlertRead]:
    """The same triage for every alert in `ids`, all or none (an unknown id is a 404 and
    nothing changes), recorded on each alert with the token's name and the required reason.
    Needs a token with the triage scope (or admin)."""
    update = AlertUpdate.model_validate(body.model_dump(exclude={"ids"}))
    alerts = service.triage_many(session, body.ids, update, triager.name)
    for tracked_id in sorted({a.tracked_branch_id for a in alerts}):
        dispatch.after_commit(session, DETECT_ALERTS, tracked_id, queue=CONTROL_QUEUE)
    return views.alert_reads(session, alerts)
