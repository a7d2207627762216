"""Web links of a repository's commits and pull requests, built from its registered URL:
GitHub (https, ssh, git@) and GitLab-style hosts (gitlab.com or any host with 'gitlab' in its
name, /-/commit/ and /-/merge_requests/). A repository with no web page (a local path) links
its commits to the dashboard's own view of the commit: the compare page with the commit as its
head. Pure string work; None where no page is known."""

from __future__ import annotations

import re
from urllib.parse import quote
from dataclasses import dataclass

from perfbisect.service.webhooks.repo_urls import github_slug

_HOSTED = re.compile(r"^(?:(?:https?|ssh|git)://(?:[^@/]+@)?|git@)(?P<host>[^/:]+)(?::\d+)?[/:](?P<path>.+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class RepoLinks:
    web: str | None  # https://host/owner/name
    kind: str | None  # "github" | "gitlab"
    local: str | None = None  # the dashboard's name of a repository with no web page

    def commit(self, sha: str) -> str | None:
        if not self.web:
            return f"/dashboard/repositories/{quote(self.local, safe='')}/compare?head={sha}" if self.local else None
        return f"{self.web}/commit/{sha}" if self.kind == "github" else f"{self.web}/-/commit/{sha}"

    def pull(self, number: int) -> str | None:
        if not self.web:
            return None
        return f"{self.web}/pull/{number}" if self.kind == "github" else f"{self.web}/-/merge_requests/{number}"


def repo_links(url: str, name: str | None = None) -> RepoLinks:
    """The web page of a registered repository URL; for a local path or an unknown host none,
    with commits linked in the dashboard when the repository's `name` is given."""
    slug = github_slug(url)
    if slug:
        return RepoLinks(f"https://github.com/{slug[0]}/{slug[1]}", "github")
    match = _HOSTED.match(url.strip())
    if match and "gitlab" in match["host"].lower():
        return RepoLinks(f"https://{match['host']}/{match['path']}", "gitlab")
    return RepoLinks(None, None, name)
