"""Backpressure: a bounded number of requests in flight per server process.

Sync routes run on a thread pool whose size matches the database pool, so a request never
waits for a connection it cannot get. Past `max_in_flight` requests at once, a new request is
answered 503 with Retry-After at once instead of joining a queue that, under overload, grows
for minutes and keeps the server slow long after the load has stopped. /healthz is exempt so a
load balancer can tell "busy" from "down".
"""

from __future__ import annotations

import anyio.to_thread
from starlette.types import ASGIApp, Receive, Scope, Send

EXEMPT = ("/healthz",)


class InFlightLimit:
    """Pure ASGI middleware: counts requests in flight (one event loop per process, so a plain
    counter is safe) and sheds the excess."""

    def __init__(self, app: ASGIApp, max_in_flight: int, retry_after_s: int = 1) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.retry_after = str(retry_after_s).encode()
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await _busy(send, self.retry_after)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def _busy(send: Send, retry_after: bytes) -> None:
    body = b'{"detail":"the server is at capacity; retry shortly"}'
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"retry-after", retry_after),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def size_thread_pool(threads: int) -> None:
    """Match the sync-route thread pool to the database pool (call at startup, in the loop)."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = threads
