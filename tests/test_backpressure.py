"""Backpressure: past the in-flight limit a request is shed at once with 503 + Retry-After;
the requests already in flight finish; /healthz always answers."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from perfbisect.service.api.backpressure import InFlightLimit


def _app(release: asyncio.Event, started: list[str]) -> InFlightLimit:
    async def slow(request):
        started.append(request.url.path)
        await release.wait()
        return PlainTextResponse("done")

    async def health(_request):
        return PlainTextResponse("ok")

    inner = Starlette(routes=[Route("/slow", slow), Route("/healthz", health)])
    return InFlightLimit(inner, max_in_flight=2, retry_after_s=3)


def test_requests_past_the_limit_are_shed_and_the_rest_finish() -> None:
    async def scenario() -> None:
        release, started = asyncio.Event(), []
        app = _app(release, started)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            held = [asyncio.create_task(client.get("/slow")) for _ in range(2)]
            while len(started) < 2:
                await asyncio.sleep(0.01)
            shed = await client.get("/slow")
            assert shed.status_code == 503 and shed.headers["retry-after"] == "3"
            assert "capacity" in shed.json()["detail"]
            assert (await client.get("/healthz")).status_code == 200  # exempt while saturated
            release.set()
            assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
            assert app.in_flight == 0
            assert (await client.get("/slow")).status_code == 200  # recovered at once

    asyncio.run(scenario())


@pytest.mark.parametrize("limit", [1, 5])
def test_the_limit_comes_from_settings(monkeypatch, limit) -> None:
    from perfbisect.service.api import create_app
    from perfbisect.service.settings import get_settings

    monkeypatch.setenv("PERFBISECT_MAX_IN_FLIGHT", str(limit))
    get_settings.cache_clear()
    try:
        app = create_app()
        layers = [m for m in app.user_middleware if m.cls is InFlightLimit]
        assert [m.kwargs["max_in_flight"] for m in layers] == [limit]
    finally:
        get_settings.cache_clear()
