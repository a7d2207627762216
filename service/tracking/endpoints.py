from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response, status
from pydantic import ValidationError

from perfbisect import dispatch
from perfbisect.queue import CONTROL_QUEUE, TRACK_BRANCH
from perfbisect.service.api.deps import AdminDep, SessionDep, SubmitterDep, get_viewer
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.bounds import MAX_ID
from perfbisect.service.errors import BadRequest
from perfbisect.service.tracking import repository, service
from perfbisect.service.tracking.schemas import (PushEvent, TrackedBranchCreate, TrackedBranchRead, TrackedBranchUpdate,
                                                 TrackRunAccepted)
from perfbisect.service.webhooks.schemas import WebhookReply

router = APIRouter(prefix="/api/tracked-branches", tags=["tracking"], responses=ERROR_RESPONSES)
READ = [Depends(get_viewer)]
TrackedId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TrackedBranchRead)
def track(session: SessionDep, _admin: AdminDep, body: TrackedBranchCreate) -> TrackedBranchRead:
    """Track a branch (admin: it runs the repository's code on a schedule): every push (or
    scheduled run) measures its new head with the benchmark set; with `start`, the backfill run
    is queued now."""
    tracked = service.create(session, body)
    if body.start:
        dispatch.after_commit(session, TRACK_BRANCH, tracked.id, queue=CONTROL_QUEUE)
    return service.read(tracked)


@router.get("", response_model=list[TrackedBranchRead], dependencies=READ)
def list_tracked(session: SessionDep) -> list[TrackedBranchRead]:
    return [service.read(t) for t in repository.list_all(session)]


@router.get("/{tracked_id}", response_model=TrackedBranchRead, dependencies=READ)
def get_tracked(session: SessionDep, tracked_id: TrackedId) -> TrackedBranchRead:
    return service.read(service.get(session, tracked_id))


@router.patch("/{tracked_id}", response_model=TrackedBranchRead)
def edit(session: SessionDep, _admin: AdminDep, tracked_id: TrackedId, body: TrackedBranchUpdate) -> TrackedBranchRead:
    """Change the trigger, interval, benchmarks (or set) or confirm trials of a tracked branch
    (admin, as adding one: its cases decide what code runs); the rest stays."""
    return service.read(service.update(session, tracked_id, body))


@router.post("/{tracked_id}/run", status_code=status.HTTP_202_ACCEPTED, response_model=TrackRunAccepted)
def run(session: SessionDep, _submitter: SubmitterDep, tracked_id: TrackedId) -> TrackRunAccepted:
    """Measure the branch's head now (nothing is measured twice)."""
    tracked = service.get(session, tracked_id)
    dispatch.after_commit(session, TRACK_BRANCH, tracked.id, queue=CONTROL_QUEUE)
    return TrackRunAccepted(tracked_branch_id=tracked.id, message=f"queued a run of {tracked.branch}")


@router.delete("/{tracked_id}", status_code=status.HTTP_204_NO_CONTENT)
def untrack(session: SessionDep, _admin: AdminDep, tracked_id: TrackedId) -> Response:
    """Stop tracking; the branch's alerts are removed with it, its measurements stay."""
    service.remove(session, tracked_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def push_reply(session: SessionDep, payload: dict) -> WebhookReply:
    """GitHub's `push` event (routed here by the webhook): a run of every push-triggered tracked
    branch it moves, queued after the request's commit. Raises BadRequest, NotFound."""
    try:
        event = PushEvent.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadRequest(f"push payload: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from exc
    targets = service.push_targets(session, event)
    for tracked in targets:
        dispatch.after_commit(session, TRACK_BRANCH, tracked.id, event.after, queue=CONTROL_QUEUE)
    if not targets:
        return WebhookReply(message=f"ignored: {event.ref} is not a tracked branch (push trigger)")
    return WebhookReply(message=f"queued a run of {len(targets)} tracked branch(es) at {event.after[:10]}: "
                                + ", ".join(f"#{t.id} {t.branch} on {t.device_class}" for t in targets))
