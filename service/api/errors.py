"""How errors look on the wire, and their place in the OpenAPI schema.

Domain errors (service.errors) render as `{"detail": "<message>"}` with their status and headers.
FastAPI's own validation errors render as `{"detail": [{"loc", "msg", "type"}, ...]}`. Both can
answer 422 (a shape that does not parse vs. a ref that does not resolve), so the schema declares
422 as either form, and the other error statuses as the message form.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from perfbisect.service.db import database_unreachable
from perfbisect.service.errors import PerfbisectError

RETRY_AFTER_S = 5


class ErrorMessage(BaseModel):
    detail: str


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrors(BaseModel):
    detail: list[ValidationIssue]


ERROR_RESPONSES: dict[int | str, dict] = {
    400: {"model": ErrorMessage, "description": "a body that cannot be read (not UTF-8, not JSON)"},
    401: {"model": ErrorMessage, "description": "no token, or an unknown or revoked one"},
    403: {"model": ErrorMessage, "description": "the token lacks the scope, or the job is not the caller's"},
    404: {"model": ErrorMessage, "description": "no such job, repository or endpoint"},
    409: {"model": ErrorMessage, "description": "conflicts with the current state"},
    422: {"model": ValidationErrors | ErrorMessage,
          "description": "the request does not parse (a list of issues) or names something unusable (a message)"},
    429: {"model": ErrorMessage, "description": "a rate limit (the token's requests, bad tokens from the address) "
          "or a quota (the token's open jobs or queued trials): retry after Retry-After seconds where given",
          "headers": {"Retry-After": {"description": "seconds until the limit's window ends",
                                      "schema": {"type": "integer", "minimum": 1}}}},
}


def _printable(value: str | int) -> str | int:
    """A location part that JSON can carry: a lone surrogate (from "\ud800" in the request) is
    escaped instead of failing the response's UTF-8 encoding."""
    return value.encode("utf-8", "backslashreplace").decode() if isinstance(value, str) else value


def validation_issues(exc: RequestValidationError) -> list[dict]:
    """FastAPI's issues without the offending `input` (and `ctx`): echoing hostile input back is
    no help, and NaN or a lone surrogate in it would make the error itself fail to render."""
    return [{"loc": [_printable(part) for part in error["loc"]], "msg": _printable(error["msg"]),
             "type": error["type"]} for error in exc.errors()]


def install_error_handler(app: FastAPI) -> None:
    """Every error answers JSON to API clients and an HTML page to a browser (dashboards.pages)."""
    from perfbisect.dashboards.pages import error_response

    @app.exception_handler(PerfbisectError)
    def _domain_error(request: Request, exc: PerfbisectError) -> Response:
        return error_response(request, exc.status_code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
        return error_response(request, 422, validation_issues(exc))

    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return error_response(request, exc.status_code, exc.detail, getattr(exc, "headers", None))

    @app.exception_handler(PoolTimeout)
    def _pool_exhausted(request: Request, _exc: PoolTimeout) -> Response:
        return error_response(request, 503, "the server is at capacity; retry shortly", {"Retry-After": "2"})

    @app.exception_handler(DBAPIError)
    def _database_unavailable(request: Request, exc: DBAPIError) -> Response:
        # An outage is the client's to retry, and the driver's text (host, user) is not theirs to
        # read. The pool pings connections before use, so the API recovers by itself.
        if not database_unreachable(exc):
            return error_response(request, 500, "internal error; the server log has the details")
        return error_response(request, 503, "database unavailable, retry later", {"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(Exception)
    def _unexpected(request: Request, _exc: Exception) -> Response:
        return error_response(request, 500, "internal error; the server log has the details")
