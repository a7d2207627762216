"""Domain errors carry their HTTP status; one handler in service.api renders them as
`{"detail": message}` (with the error's headers). The CLI prints the message and exits non-zero."""

from __future__ import annotations


class PerfbisectError(Exception):
    status_code = 500
    headers: dict[str, str] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthenticated(PerfbisectError):
    """No token, or one that is unknown or revoked (RFC 6750: answer with a Bearer challenge)."""

    status_code = 401
    headers = {"WWW-Authenticate": 'Bearer realm="perfbisect"'}


class Forbidden(PerfbisectError):
    """A valid token without the scope (or ownership) the operation needs."""

    status_code = 403


class NotFound(PerfbisectError):
    status_code = 404


class BadRequest(PerfbisectError):
    status_code = 422


class Conflict(PerfbisectError):
    status_code = 409


class Unavailable(PerfbisectError):
    status_code = 503


class TooManyRequests(PerfbisectError):
    """A rate limit (with Retry-After) or a quota (without: it frees up as jobs finish)."""

    status_code = 429

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
