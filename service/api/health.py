from __future__ import annotations

from functools import lru_cache

import redis
from fastapi import APIRouter
from fastapi.responses import JSONResponse, RedirectResponse
from sqlalchemy import text

from perfbisect.service.db import get_engine
from perfbisect.service.settings import get_settings

router = APIRouter(tags=["health"])


@lru_cache
def broker_client(url: str) -> redis.Redis:
    """One client (and connection pool) for every health check, not one per request."""
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    """A person who opens the server's address lands on the dashboard."""
    return RedirectResponse("/dashboard", status_code=307)


@router.get("/healthz")
def healthz() -> JSONResponse:
    """The database answers a query and, when one is configured, the broker answers PING. A
    failure is named, never detailed: the driver's text would expose hosts and users."""
    checks: dict[str, str] = {}
    try:
        with get_engine().connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception:
        checks["database"] = "database unavailable"
    settings = get_settings()
    if settings.redis_url:
        try:
            broker_client(settings.redis_url).ping()
            checks["broker"] = "ok"
        except Exception:
            checks["broker"] = "broker unavailable"
    else:
        checks["broker"] = "embedded"
    healthy = all(v in ("ok", "embedded") for v in checks.values())
    headers = {} if healthy else {"Retry-After": "5"}
    return JSONResponse(status_code=200 if healthy else 503, headers=headers,
                        content={"status": "ok" if healthy else "degraded", **checks})
