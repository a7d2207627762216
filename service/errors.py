"""Domain errors carry their HTTP status; one handler in service.api renders them as
`{"detail": message}`. The CLI prints the message and exits non-zero."""

from __future__ import annotations


class PerfbisectError(Exception):
    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(PerfbisectError):
    status_code = 404


class BadRequest(PerfbisectError):
    status_code = 422


class Conflict(PerfbisectError):
    status_code = 409


class Unavailable(PerfbisectError):
    status_code = 503
