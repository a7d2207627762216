"""Matching repository URLs: what GitHub sends in an event against what was registered, and
the owner/name of a GitHub repository for the REST API. Pure string work."""

from __future__ import annotations

import re

_GITHUB_RE = re.compile(
    r"^(?:(?:https?|git|ssh)://(?:[^@/]+@)?github\.com(?::\d+)?/|git@github\.com:)"
    r"(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)
_SCHEME_RE = re.compile(r"^(?:https?|git|ssh)://(?:[^@/]+@)?")


def github_slug(url: str) -> tuple[str, str] | None:
    """('owner', 'name') for https://github.com/owner/name(.git), git@github.com:owner/name.git
    or ssh://git@github.com/owner/name; None for any other host or a local path."""
    match = _GITHUB_RE.match(url.strip())
    return (match["owner"], match["name"]) if match else None


def normalized_url(url: str) -> str:
    """A comparable form: GitHub URLs become 'github.com/owner/name' (lower case, as GitHub
    treats them); other URLs lose their scheme, user, trailing '/' and '.git'; paths stay paths."""
    slug = github_slug(url)
    if slug:
        return f"github.com/{slug[0]}/{slug[1]}".lower()
    text = _SCHEME_RE.sub("", url.strip()).rstrip("/")
    if text.startswith("git@"):
        text = text[4:].replace(":", "/", 1)
    return text[:-4] if text.endswith(".git") else text


def event_urls(repository: dict) -> set[str]:
    """The normalized URLs a webhook's `repository` object names (clone_url, ssh_url, html_url,
    git_url, and github.com/<full_name>)."""
    urls = {normalized_url(repository[k]) for k in ("clone_url", "ssh_url", "html_url", "git_url")
            if isinstance(repository.get(k), str) and repository[k]}
    if isinstance(repository.get("full_name"), str) and "/" in repository["full_name"]:
        urls.add(f"github.com/{repository['full_name']}".lower())
    return urls
