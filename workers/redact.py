"""Redact the service's secrets from anything stored out of a build's or a trial's output.

Repository code never sees the secrets in its environment (workers/sandbox.py), but a hostile
build may still find one (a world-readable config file, a process it should not see): whatever
it prints is scrubbed of every configured secret, and of the repository's own env values
(service/repos/redaction.py), before it reaches the database or a log."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from perfbisect.service.repos.redaction import REDACTED, scrub, secret_values
from perfbisect.service.settings import get_settings

# Names of environment variables whose values are secrets wherever they come from.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE|_URL$)", re.I)
# user:password@ inside any URL, even one that is not configured here.
URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^:/@\s]*):[^@\s/]+@", re.I)


@lru_cache
def secrets() -> tuple[str, ...]:
    """Every secret this worker knows: the settings' URLs, tokens and passwords (and the
    passwords inside the URLs), and any variable of this process named like a secret."""
    settings = get_settings()
    values = [settings.database_url, settings.redis_url, settings.github_token, settings.webhook_secret,
              settings.smtp_password]
    values += [value for name, value in os.environ.items()
               if SECRET_NAME.search(name) and not name.startswith(("PATH", "LD_"))]
    return secret_values(values)


def _with(extra: Iterable[str]) -> tuple[str, ...]:
    """The worker's secrets and `extra` values (a repository's env), longest first."""
    extra = secret_values(extra)
    return tuple(sorted({*secrets(), *extra}, key=len, reverse=True)) if extra else secrets()


def redact(text: str, extra: Iterable[str] = ()) -> str:
    return _redact(text, _with(extra))


def _redact(text: str, known: tuple[str, ...]) -> str:
    return URL_PASSWORD.sub(rf"\g<scheme>:{REDACTED}@", scrub(text, known))


def redact_tree(value: Any, extra: Iterable[str] = ()) -> Any:
    """`redact` every string inside a JSON-like value (a harness result), also of the `extra`
    values (the repository's env, which its code sees)."""
    known = _with(extra)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return _redact(item, known)
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return item

    return walk(value)
