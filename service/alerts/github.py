"""Every GitHub call of the alert bot goes through `github_call`, so its transport (a test's
mock, a retrying client) is swapped in one place."""

from __future__ import annotations

from typing import Any

import httpx

from perfbisect.service.settings import get_settings

API_VERSION = "2022-11-28"


def github_call(client: httpx.Client, method: str, path: str, *, json: Any = None,
                params: dict[str, Any] | None = None) -> Any:
    """`method` on the REST API `path` (e.g. /repos/o/r/commits/sha/pulls) with the configured
    token; returns the decoded JSON. Raises httpx.HTTPError (including non-2xx answers)."""
    settings = get_settings()
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
               "User-Agent": "perfbisect"}
    if settings.github_token:
        headers["Authorization"] = f"Bearer {settings.github_token}"
    response = client.request(method, f"{settings.github_api_url.rstrip('/')}{path}", json=json, params=params,
                              headers=headers)
    response.raise_for_status()
    return response.json()
