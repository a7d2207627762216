"""How errors look on the wire, and their place in the OpenAPI schema.

Every error an API client gets is an RFC 7807 problem (`application/problem+json`): `type`
(about:blank: the status says it all), `title` (the status's phrase), `status`, `detail` and
`instance` (the request's path). `detail` is what it always was: the message of a domain error
(service.errors), or FastAPI's validation issues `[{"loc", "msg", "type"}, ...]`. Both can
answer 422 (a shape that does not parse vs. a ref that does not resolve), so the schema declares
422 as either form, and the other error statuses as the message form.
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from perfbisect.service.api.responses import FastJSONResponse
from perfbisect.service.db import database_unreachable
from perfbisect.service.errors import PerfbisectError

RETRY_AFTER_S = 5
PROBLEM_JSON = "application/problem+json"


class Problem(BaseModel):
    """RFC 7807's members; `detail` is typed by each form below."""

    type: str = "about:blank"
    title: str
    status: int
    instance: str


class ErrorMessage(Problem):
    detail: str


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrors(Problem):
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


def problem_body(status: int, detail: object, instance: str) -> dict:
    """An RFC 7807 problem: also what the middlewares (body limit, shedding) send as bytes."""
    return {"type": "about:blank", "title": _title(status), "status": status, "detail": detail, "instance": instance}


def problem(request: Request, status: int, detail: object, headers: dict[str, str] | None = None) -> Response:
    """The error as an RFC 7807 problem."""
    return FastJSONResponse(status_code=status, content=problem_body(status, detail, request.url.path),
                            headers=headers, media_type=PROBLEM_JSON)


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a status Python does not name
        return "Error"


def declare_problem_json(app: FastAPI) -> None:
    """FastAPI declares every response model under application/json; an error's is a problem."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            for operation in (op for path in build()["paths"].values() for op in path.values()):
                for code, response in operation.get("responses", {}).items():
                    content = response.get("content", {})
                    if code[0] in "45" and "application/json" in content:
                        content[PROBLEM_JSON] = content.pop("application/json")
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def install_error_handler(app: FastAPI) -> None:
    """Every error answers a problem to API clients and an HTML page to a browser (dashboards.pages)."""
    from perfbisect.dashboards.pages import error_page, prefers_html

    def error_response(request: Request, status: int, detail: object,
                       headers: dict[str, str] | None = None) -> Response:
        respond = error_page if prefers_html(request) else problem
        return respond(request, status, detail, headers)

    declare_problem_json(app)

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
