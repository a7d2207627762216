"""The CLI's user-facing error, kept apart from follow.py so that importing the CLI entry point
does not import the job machinery (and, through it, torch)."""

from __future__ import annotations


class CLIError(Exception):
    """A message for the user; the CLI prints it and exits 2."""


class Interrupted(Exception):
    """Ctrl-C while following job `job_id`; `message` says what became of the job."""

    def __init__(self, job_id: int, message: str) -> None:
        super().__init__(message)
        self.job_id, self.message = job_id, message


def validation_message(exc) -> str:
    """A pydantic ValidationError as the API words it: 'field: message; ...', without pydantic's
    'Value error, ' prefix (the message is the schema's own)."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
