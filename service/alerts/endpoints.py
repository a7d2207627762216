from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from perfbisect import dispatch
from perfbisect.queue import CONTROL_QUEUE, DETECT_ALERTS
from perfbisect.service.alerts import repository, service, views
from perfbisect.service.alerts.schemas import AlertRead, AlertUpdate
from perfbisect.service.api.deps import SessionDep, SubmitterDep, get_viewer
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import MAX_ID
from perfbisect.service.models import AlertStatus

router = APIRouter(prefix="/api/alerts", tags=["alerts"], responses=ERROR_RESPONSES)
READ = [Depends(get_viewer)]
AlertId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.get("", response_model=list[AlertRead], dependencies=READ)
def list_alerts(session: SessionDep, status: AlertStatus | None = None,
                tracked_branch: int | None = Query(None, ge=1, le=MAX_ID),
                limit: int = Query(100, ge=1, le=1000)) -> list[AlertRead]:
    """Alerts, newest first: steps found on tracked branches, with their cases and culprits."""
    return views.alert_reads(session, repository.listing(session, status=status, tracked_id=tracked_branch,
                                                         limit=limit))


@router.get("/{alert_id}", response_model=AlertRead, dependencies=READ)
def get_alert(session: SessionDep, alert_id: AlertId) -> AlertRead:
    return views.alert_reads(session, [service.get(session, alert_id)])[0]


@router.patch("/{alert_id}", response_model=AlertRead)
def triage_alert(session: SessionDep, _submitter: SubmitterDep, alert_id: AlertId, body: AlertUpdate) -> AlertRead:
    """Triage: new, acknowledged, invalid, fixed or expected (and a note). A triaged alert is
    not raised again; invalid or expected cancels its bisect, whose slot goes to the next alert."""
    alert = service.triage(session, alert_id, body)
    dispatch.after_commit(session, DETECT_ALERTS, alert.tracked_branch_id, queue=CONTROL_QUEUE)
    return views.alert_reads(session, [alert])[0]
