"""The CLI's user-facing error, kept apart from follow.py so that importing the CLI entry point
does not import the job machinery (and, through it, torch)."""

from __future__ import annotations


class CLIError(Exception):
    """A message for the user; the CLI prints it and exits 2."""
