"""The FastAPI application: routers per domain, one handler for domain errors, /healthz."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from sqlalchemy.exc import DBAPIError

from service.db import database_unreachable
from service.errors import PerfbisectError

RETRY_AFTER_S = 5


def create_app() -> FastAPI:
    from dashboards.routes import router as dashboard_router
    from service.api.health import router as health_router
    from service.jobs.endpoints import router as jobs_router
    from service.repos.endpoints import router as repos_router
    from service.webhooks.endpoints import router as webhooks_router

    app = FastAPI(
        title="perfbisect",
        version="0.1.0",
        description="Automated performance-regression bisection for GPU kernel libraries: give it a "
        "repository, a commit range and the shapes that matter; it names every commit that moved "
        "performance, with the step per shape and its confidence interval.",
    )

    @app.exception_handler(PerfbisectError)
    def _domain_error(_request: Request, exc: PerfbisectError) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, content={"detail": exc.message})

    @app.exception_handler(DBAPIError)
    def _database_unavailable(_request: Request, exc: DBAPIError) -> JSONResponse:
        # An outage is the client's to retry, and the driver's text (host, user) is not theirs to
        # read. The pool pings connections before use, so the API recovers by itself.
        if not database_unreachable(exc):
            raise exc
        return JSONResponse(status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)},
                            content={"detail": "database unavailable, retry later"})

    for router in (health_router, repos_router, jobs_router, webhooks_router, dashboard_router):
        app.include_router(router)
    return app
