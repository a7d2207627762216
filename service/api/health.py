from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.db import get_engine
from service.settings import get_settings

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> JSONResponse:
    """The database answers a query and, when one is configured, the broker answers PING."""
    checks: dict[str, str] = {}
    try:
        with get_engine().connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {exc.__class__.__name__}: {exc}"
    settings = get_settings()
    if settings.redis_url:
        import redis

        try:
            redis.Redis.from_url(settings.redis_url, socket_connect_timeout=2).ping()
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"error: {exc.__class__.__name__}: {exc}"
    else:
        checks["broker"] = "embedded"
    healthy = all(v in ("ok", "embedded") for v in checks.values())
    return JSONResponse(status_code=200 if healthy else 503, content={"status": "ok" if healthy else "degraded", **checks})
