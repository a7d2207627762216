"""GitHub's REST API, the one client of every part of perfbisect that talks to GitHub: the PR
bot's report comments and merge gate (service/webhooks/github.py) and the alert bot's commit-to-PR
lookups and comments (service/alerts/bot.py). httpx for HTTP, tenacity for the retries; every call
goes through `GitHubClient.request`, so every use has the same policy:

- a rate-limit answer (403 or 429 with Retry-After, or with X-RateLimit-Remaining: 0) waits as
  long as GitHub says (Retry-After seconds, else until X-RateLimit-Reset), capped at `max_wait`;
- a 5xx or a connection error is retried with exponential backoff;
- anything else (a 403 for missing permissions, a 404, a 422) is raised at once;
- a list (comments, check runs, a commit's pulls) is read page after page (Link: rel="next"),
  never only its first 100 items.

`connect(slug)` builds one from Settings (polar's `get_client`). The client takes an httpx.Client,
so tests put GitHub's servers behind an httpx.MockTransport.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from perfbisect.service.settings import get_settings

API_VERSION = "2022-11-28"
PER_PAGE = 100


class RateLimited(httpx.HTTPStatusError):
    """A rate-limit answer; `wait_s` is how long GitHub asked us to wait."""

    def __init__(self, response: httpx.Response, wait_s: float) -> None:
        super().__init__(f"GitHub rate limit ({response.status_code}); retry in {wait_s:.0f} s",
                         request=response.request, response=response)
        self.wait_s = wait_s


def rate_limit_wait(response: httpx.Response, now: float | None = None) -> float | None:
    """Seconds GitHub asks us to wait, or None when `response` is not a rate-limit answer."""
    if response.status_code not in (403, 429):
        return None
    retry_after = response.headers.get("retry-after")
    if retry_after and retry_after.strip().isdigit():
        return float(retry_after)
    if response.headers.get("x-ratelimit-remaining") == "0":
        reset = response.headers.get("x-ratelimit-reset", "")
        if reset.isdigit():
            return max(0.0, float(reset) - (now if now is not None else time.time()))
        return 60.0
    if response.status_code == 429:
        return 60.0
    return None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, RateLimited):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


def next_link(response: httpx.Response) -> str | None:
    """The rel="next" URL of GitHub's Link header (httpx parses it), or None on the last page."""
    return response.links.get("next", {}).get("url")


class GitHubClient:
    """One repository's API on an httpx.Client (not closed here). Without a token the calls go
    out unauthenticated (public repositories' reads)."""

    def __init__(self, http: httpx.Client, api_url: str, owner: str, name: str, token: str, *,
                 attempts: int = 4, max_wait: float = 120.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.http, self.repo_api = http, f"{api_url.rstrip('/')}/repos/{owner}/{name}"
        self.headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                        "User-Agent": "perfbisect"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.attempts, self.max_wait, self.sleep = attempts, max_wait, sleep

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RateLimited):
            return min(exc.wait_s, self.max_wait)
        return min(2.0 ** (state.attempt_number - 1), self.max_wait)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One call with the retry policy of the module docstring; `url` is absolute, or a path
        under the repository's API (`/issues/7/comments`). Raises httpx.HTTPError."""
        if url.startswith("/"):
            url = self.repo_api + url

        def once() -> httpx.Response:
            response = self.http.request(method, url, headers=self.headers, **kwargs)
            wait = rate_limit_wait(response)
            if wait is not None:
                raise RateLimited(response, wait)
            response.raise_for_status()
            return response

        retrying = Retrying(retry=retry_if_exception(_retryable), wait=self._wait, sleep=self.sleep,
                            stop=stop_after_attempt(self.attempts), reraise=True)
        return retrying(once)

    def paginate(self, path: str, key: str | None = None, params: dict[str, Any] | None = None) -> Iterator[Any]:
        """Every item of a list endpoint, page after page (Link: rel="next"). `key` names the list
        in an object answer (check runs come as {"total_count", "check_runs": [...]})."""
        url: str | None = path
        query: dict[str, Any] | None = {**(params or {}), "per_page": PER_PAGE}
        while url:
            response = self.request("GET", url, params=query)
            page = response.json()
            yield from (page.get(key) or []) if key else page
            url, query = next_link(response), None  # the next link carries its own query

    def comments(self, issue: int) -> Iterator[dict[str, Any]]:
        """Every comment of the issue or PR, oldest first."""
        return self.paginate(f"/issues/{issue}/comments")

    def upsert_comment(self, issue: int, body: str, mark: str) -> tuple[str, str | None]:
        """Edit the first comment carrying `mark` (searched on every page) or post a new one.
        Returns ("created" | "updated", its html_url)."""
        earlier = next((c for c in self.comments(issue) if mark in (c.get("body") or "")), None)
        if earlier is not None:
            response = self.request("PATCH", f"/issues/comments/{earlier['id']}", json={"body": body})
            return "updated", response.json().get("html_url")
        response = self.request("POST", f"/issues/{issue}/comments", json={"body": body})
        return "created", response.json().get("html_url")

    def pulls_of_commit(self, sha: str) -> list[dict[str, Any]]:
        """The pull requests that contain `sha` (GitHub's commit-to-PR lookup)."""
        return list(self.paginate(f"/commits/{sha}/pulls"))

    def check_run(self, head_sha: str, name: str, conclusion: str | None, title: str, summary: str,
                  details_url: str | None = None) -> dict[str, Any]:
        """The check run `name` on `head_sha`: completed with `conclusion`, or in progress when it
        is None. An existing run of that name on the commit is updated, so a job that started
        one (or a retried task) never leaves a second. Needs a GitHub App token."""
        payload: dict[str, Any] = {"name": name, "output": {"title": title, "summary": summary}}
        payload |= {"status": "completed", "conclusion": conclusion} if conclusion else {"status": "in_progress"}
        if details_url:
            payload["details_url"] = details_url
        runs = self.paginate(f"/commits/{head_sha}/check-runs", "check_runs", {"check_name": name})
        existing = next((r for r in runs if r.get("name") == name), None)
        if existing is not None:
            return self.request("PATCH", f"/check-runs/{existing['id']}", json=payload).json()
        return self.request("POST", "/check-runs", json={**payload, "head_sha": head_sha}).json()

    def commit_status(self, sha: str, context: str, state: str, description: str,
                      target_url: str | None = None) -> dict[str, Any]:
        """A commit status (what a personal token can set where check runs need an App)."""
        payload = {"state": state, "context": context, "description": description[:140]}
        if target_url:
            payload["target_url"] = target_url
        return self.request("POST", f"/statuses/{sha}", json=payload).json()


@contextmanager
def connect(slug: tuple[str, str], http: httpx.Client | None = None) -> Iterator[GitHubClient]:
    """The client of repository `slug` (owner, name) with the configured API URL and token, on
    `http` (a test's mock transport), else on an httpx.Client it owns and closes."""
    settings = get_settings()
    owned = http is None
    http = http or httpx.Client(timeout=30)
    try:
        yield GitHubClient(http, settings.github_api_url, slug[0], slug[1], settings.github_token or "")
    finally:
        if owned:
            http.close()
