"""What the API serves to a browser besides the dashboard pages: the shipped static assets
(uPlot, Swagger UI, ReDoc: no CDN), the self-hosted /docs and /redoc, and HTML error pages for
requests whose Accept header prefers text/html (API clients keep getting JSON)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

STATIC = Path(__file__).parent / "static"
_templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
TITLES = {400: "Bad request", 401: "Not signed", 404: "Not found", 405: "Method not allowed",
          409: "Conflict", 422: "Invalid request", 500: "Server error", 503: "Busy"}


def prefers_html(request: Request) -> bool:
    """True when text/html ranks above application/json in the Accept header (a browser's
    navigation); a missing header or */* (curl, httpx) means JSON."""
    ranked: dict[str, float] = {}
    for part in request.headers.get("accept", "").split(","):
        media, *params = [p.strip() for p in part.split(";")]
        q = next((float(p[2:]) for p in params if p.startswith("q=") and _is_float(p[2:])), 1.0)
        ranked[media.lower()] = q
    return ranked.get("text/html", 0.0) > ranked.get("application/json", 0.0)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def error_page(request: Request, status: int, detail: object, headers: dict[str, str] | None = None) -> Response:
    """The error as an HTML page for a browser (service.api.errors answers API clients)."""
    if isinstance(detail, list):  # a validation error: one line per field
        lines = [f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in detail]
    else:
        lines = [str(detail)]
    return _templates.TemplateResponse(request, "error.html", {"status": status, "title": TITLES.get(status, "Error"),
                                                               "lines": lines}, status_code=status, headers=headers)


def mount(app: FastAPI) -> None:
    """Static files, /docs and /redoc served from the package's own copies."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        return _templates.TemplateResponse(request, "api_docs.html", {"kind": "swagger", "title": f"{app.title} API",
                                                                      "openapi_url": app.openapi_url or "/openapi.json"})

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        return _templates.TemplateResponse(request, "api_docs.html", {"kind": "redoc", "title": f"{app.title} API",
                                                                      "openapi_url": app.openapi_url or "/openapi.json"})
