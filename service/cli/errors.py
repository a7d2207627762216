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
