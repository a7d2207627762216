"""Backpressure: a bounded number of requests in flight per server process.

Past `max_in_flight` requests at once, a new request is
answered 503 with Retry-After at once instead of joining a queue that, under overload, grows
for minutes and keeps the server slow long after the load has stopped. /healthz is exempt so a
load balancer can tell "busy" from "down".

Every request in flight can have a thread at once (size_thread_pool). A sync route holds its
session's database connection until its response is serialized, and FastAPI serializes in the
thread pool too: with fewer threads than requests in flight, the requests holding connections
queued for a thread behind requests that held threads and waited for a connection, and every
request stalled until the pool timeout (tests/test_serving_pools.py). With a thread for each,
a request waits only for a connection, which one that is running gives back.
"""

from __future__ import annotations

import json

import anyio.to_thread
from starlette.types import ASGIApp, Receive, Scope, Send

from perfbisect.service.api.errors import PROBLEM_JSON, problem_body

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
            await _busy(scope, send, self.retry_after)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def _busy(scope: Scope, send: Send, retry_after: bytes) -> None:
    body = json.dumps(problem_body(503, "the server is at capacity; retry shortly", scope["path"])).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", PROBLEM_JSON.encode()), (b"retry-after", retry_after),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# Threads beyond the limit, for the exempt health checks (each takes and gives back its own
# connection inside its thread, so it never holds one while waiting).
EXEMPT_THREADS = 4


def size_thread_pool(max_in_flight: int) -> None:
    """A thread for every request in flight, and a few for the exempt routes (call at startup,
    in the event loop: the limiter is the loop's)."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = max_in_flight + EXEMPT_THREADS
