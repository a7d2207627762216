"""The FastAPI application: routers per domain, one handler for domain errors, /healthz."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.backpressure import InFlightLimit, size_thread_pool
from service.errors import PerfbisectError
from service.settings import get_settings


def create_app() -> FastAPI:
    from dashboards import pages
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
        docs_url=None, redoc_url=None,  # served by dashboards.pages from the package's own assets
    )

    # Every error answers JSON to API clients and an HTML page to a browser (dashboards.pages).
    @app.exception_handler(PoolTimeout)
    def _pool_exhausted(request: Request, _exc: PoolTimeout) -> Response:
        return pages.error_response(request, 503, "the server is at capacity; retry shortly", {"Retry-After": "2"})

    @app.exception_handler(PerfbisectError)
    def _domain_error(request: Request, exc: PerfbisectError) -> Response:
        return pages.error_response(request, exc.status_code, exc.message)

    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return pages.error_response(request, exc.status_code, exc.detail, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return pages.error_response(request, 422, jsonable_encoder(exc.errors()))

    @app.exception_handler(Exception)
    def _unexpected(request: Request, _exc: Exception) -> Response:
        return pages.error_response(request, 500, "internal error; the server log has the details")

    pages.mount(app)

    for router in (health_router, repos_router, jobs_router, webhooks_router, dashboard_router):
        app.include_router(router)
    settings = get_settings()
    app.add_middleware(InFlightLimit, max_in_flight=settings.max_in_flight)
    app.router.on_startup.append(lambda: size_thread_pool(settings.web_threads))
    return app
