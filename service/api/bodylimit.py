"""A request body larger than the limit is refused with 413 before it is read: at once when
Content-Length says so, else (chunked, or a Content-Length that lies) as soon as the bytes
received pass it, so no route, auth check or JSON parser ever holds more than the limit.

The limit is PERFBISECT_MAX_BODY_BYTES (1 MiB) for the API and PERFBISECT_WEBHOOK_MAX_BODY_BYTES
(25 MiB, GitHub's own cap on a delivery) under /api/webhooks/.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from perfbisect.service.api.errors import PROBLEM_JSON, problem_body

WEBHOOKS = "/api/webhooks/"


MESSAGE = ("the request body is larger than the limit of {limit} bytes "
           "(PERFBISECT_MAX_BODY_BYTES; PERFBISECT_WEBHOOK_MAX_BODY_BYTES for webhooks)")


class BodyTooLarge(HTTPException):
    """Raised from `receive` mid-body: an HTTPException, so FastAPI's body parsing passes it on
    (it turns other exceptions into a 400) and the app renders it as a 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, MESSAGE.format(limit=limit))


class BodyLimit:
    """Pure ASGI middleware (a BaseHTTPMiddleware would read the body first)."""

    def __init__(self, app: ASGIApp, max_bytes: int, webhook_max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.webhook_max_bytes = webhook_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.webhook_max_bytes if scope["path"].startswith(WEBHOOKS) else self.max_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(scope, send, limit)
            return
        received, started = 0, False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if not started:
                await _too_large(scope, send, limit)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(scope: Scope, send: Send, limit: int) -> None:
    body = json.dumps(problem_body(413, MESSAGE.format(limit=limit), scope["path"])).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
