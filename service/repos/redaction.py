"""Redaction by value: a repository's `env` values are secrets the API shows as '***', so
whatever its code printed (a build log's tail, a harness error, a case's traceback) is scrubbed of
those values before it is stored and again before it is shown: the job's outcome and error, the
reports, the pages and the trials.

Matched by value, not by name: a build that runs `echo $DEPLOY_KEY` prints the value under no
name at all. Values shorter than MIN_SECRET_LEN are not secrets this can hide (a "0" or "true"
would blank ordinary text); README, "Deployment", says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

REDACTED = "[redacted]"
MIN_SECRET_LEN = 6


def _url_passwords(value: str) -> list[str]:
    try:
        password = urlsplit(value).password
    except ValueError:
        return []
    return [p for p in (password, unquote(password or "")) if p]


def secret_values(values: Iterable[str | None]) -> tuple[str, ...]:
    """The values worth hiding (and the passwords inside URL values), longest first, so a URL is
    replaced whole before its password is."""
    found = {str(v) for v in values if v}
    for value in list(found):
        if "://" in value:
            found.update(_url_passwords(value))
    return tuple(sorted((v for v in found if len(v) >= MIN_SECRET_LEN), key=len, reverse=True))


def env_secrets(env: Mapping[str, Any] | None) -> tuple[str, ...]:
    """A repository's env values as secrets."""
    return secret_values(str(v) for v in (env or {}).values())


def scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_tree(value: Any, secrets: tuple[str, ...]) -> Any:
    """`scrub` every string inside a JSON-like value (keys included: a case name is a key)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {scrub_tree(k, secrets): scrub_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_tree(v, secrets) for v in value]
    return value
