"""Redact the service's secrets from anything stored out of a build's or a trial's output.

Repository code never sees the secrets in its environment (workers/sandbox.py), but a hostile
build may still find one (a world-readable config file, a process it should not see): whatever
it prints is scrubbed of every configured secret before it reaches the database or a log."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit

from perfbisect.service.settings import get_settings

REDACTED = "[redacted]"
# Names of environment variables whose values are secrets wherever they come from.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE|_URL$)", re.I)
# user:password@ inside any URL, even one that is not configured here.
URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^:/@\s]*):[^@\s/]+@", re.I)
MIN_SECRET_LEN = 6  # shorter values (a port, "true") would redact ordinary text


def _url_parts(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    return [p for p in (parts.password, unquote(parts.password or "")) if p]


@lru_cache
def secrets() -> tuple[str, ...]:
    """Every secret this worker knows: the settings' URLs, tokens and passwords (and the
    passwords inside the URLs), and any variable of this process named like a secret. Longest
    first, so a URL is redacted whole before its password is."""
    settings = get_settings()
    values = {settings.database_url, settings.redis_url, settings.github_token, settings.webhook_secret,
              settings.smtp_password}
    for name, value in os.environ.items():
        if SECRET_NAME.search(name) and not name.startswith(("PATH", "LD_")):
            values.add(value)
    for value in list(values):
        if value and "://" in value:
            values.update(_url_parts(value))
    kept = {v for v in values if v and len(v) >= MIN_SECRET_LEN}
    return tuple(sorted(kept, key=len, reverse=True))


def redact(text: str) -> str:
    for secret in secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return URL_PASSWORD.sub(rf"\g<scheme>:{REDACTED}@", text)


def redact_tree(value: Any) -> Any:
    """`redact` every string inside a JSON-like value (a harness result)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_tree(v) for v in value]
    return value
