"""POST /api/webhooks/github: GitHub's pull_request deliveries start a compare job.

Off (404) unless PERFBISECT_WEBHOOK_SECRET is set. Order of checks: signature (401), delivery id
(422 when missing; 200 and nothing done when this delivery id or this exact body was handled
before: the signature covers the body only, so a replay with a new id is caught by the body),
event and action (202, ignored), payload shape (422), repository (404), benchmarks (422); then
the job is created and its first planning round queued after the request's commit, as POST
/api/jobs/compare does.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Header, Request, Response, status
from pydantic import ValidationError

from perfbisect import dispatch
from perfbisect.queue import ADVANCE_JOB, CONTROL_QUEUE, START_CHECK
from perfbisect.service.api.deps import SessionDep
from perfbisect.service.api.errors import ERROR_RESPONSES
from perfbisect.service.errors import BadRequest, NotFound
from perfbisect.service.settings import get_settings
from perfbisect.service.tracking.endpoints import push_reply
from perfbisect.service.webhooks import service
from perfbisect.service.webhooks.schemas import HANDLED_ACTIONS, PullRequestEvent, WebhookReply
from perfbisect.service.webhooks.signature import verify_signature

router = APIRouter(prefix="/api/webhooks", tags=["webhooks"], responses=ERROR_RESPONSES)
DUPLICATE = {200: {"model": WebhookReply, "description": "a delivery handled before: nothing is done again"}}


async def raw_body(request: Request) -> bytes:
    """The body exactly as sent: the signature is over these bytes, not over re-encoded JSON."""
    return await request.body()


def _payload(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The event JSON, sent as application/json or as the form field `payload`. Raises BadRequest."""
    try:
        if content_type and content_type.startswith("application/x-www-form-urlencoded"):
            body = parse_qs(body.decode()).get("payload", [""])[0].encode()
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the webhook body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise BadRequest("the webhook body must be a JSON object")
    return payload


@router.post("/github", status_code=status.HTTP_202_ACCEPTED, response_model=WebhookReply, responses=DUPLICATE)
def github_webhook(
    session: SessionDep,
    response: Response,
    body: Annotated[bytes, Depends(raw_body)],
    x_github_event: Annotated[str | None, Header(max_length=100)] = None,
    x_hub_signature_256: Annotated[str | None, Header(max_length=200)] = None,
    x_github_delivery: Annotated[str | None, Header(max_length=100, pattern=r"^[\x21-\x7e]+$")] = None,
    content_type: Annotated[str | None, Header(max_length=200)] = None,
) -> WebhookReply:
    """A pull_request event (opened, synchronize, reopened) creates a compare job of the PR's
    base sha against its head sha on the cases of the repository's latest bisect; any other
    event or action is acknowledged and ignored."""
    secret = get_settings().webhook_secret
    if not secret:
        raise NotFound("the GitHub webhook is off: set PERFBISECT_WEBHOOK_SECRET (and the same secret in the "
                       "repository's webhook settings) to turn it on")
    verify_signature(secret, body, x_hub_signature_256)
    if not x_github_delivery:
        raise BadRequest("missing X-GitHub-Delivery: deliveries are de-duplicated by their id")
    delivery = service.record_delivery(session, x_github_delivery, body, x_github_event or "")
    if delivery is None:
        response.status_code = status.HTTP_200_OK
        return WebhookReply(message=f"ignored: delivery {x_github_delivery} (or the same body) was handled before")
    if x_github_event == "ping":
        return WebhookReply(message="pong")
    if x_github_event == "push":
        return push_reply(session, _payload(body, content_type))
    if x_github_event != "pull_request":
        return WebhookReply(message=f"ignored: event {x_github_event or '(none)'!r} is not handled "
                                    "(only pull_request and push)")
    payload = _payload(body, content_type)
    action = payload.get("action")
    if action not in HANDLED_ACTIONS:
        return WebhookReply(message=f"ignored: pull_request action {action!r} is not handled "
                                    f"(only {', '.join(HANDLED_ACTIONS)})")
    try:
        event = PullRequestEvent.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadRequest(f"pull_request payload: {where}: {first['msg']}") from exc
    outcome = service.compare_pull_request(session, event)
    job = outcome.job
    delivery.job_id = job.id
    pr = event.pull_request
    if outcome.created:
        if get_settings().github_token:  # the PR's check shows the new head measuring; notify_job completes it
            dispatch.after_commit(session, START_CHECK, job.id, pr.head.sha, queue=CONTROL_QUEUE)
        dispatch.after_commit(session, ADVANCE_JOB, job.id)
    verb = "queued" if outcome.created else "already have"
    superseded = f"; cancelled superseded job(s) {', '.join(map(str, outcome.superseded))}" if outcome.superseded else ""
    return WebhookReply(
        message=f"{verb} compare job {job.id}: PR #{pr.number} {pr.base.sha[:10]}..{pr.head.sha[:10]}{superseded}",
        job_id=job.id, url=f"/api/jobs/{job.id}", dashboard=f"/dashboard/jobs/{job.id}",
        superseded=list(outcome.superseded),
    )
