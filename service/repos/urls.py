"""Which repository URLs may be cloned: remote git URLs over https, http, ssh or git, and local
paths only under the directories an admin allowed (PERFBISECT_LOCAL_REPO_ROOTS).

Refused: git's remote-helper syntax `<transport>::<address>` (`ext::` runs a command, `fd::`
reads the service's file descriptors), anything that starts with `-` (an option to git clone),
other schemes, relative paths, and local paths outside the allowed roots (`.`, the service's own
checkout, /etc...).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from perfbisect.service.errors import BadRequest

REMOTE_SCHEMES = ("https", "http", "ssh", "git")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HELPER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*::")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!//)")  # git@github.com:acme/lib.git


def checked_url(url: str, local_roots: Sequence[Path]) -> str:
    """The URL to store and clone: a remote URL as given, a local path resolved (symlinks
    followed, so the check holds for what git will read). Raises BadRequest naming the rule."""
    if url != url.strip() or url.startswith("-"):
        raise BadRequest(f"repository URL {url!r} must not start with '-' or white space")
    if _HELPER.match(url):
        raise BadRequest(f"repository URL {url!r} uses git's '<transport>::' remote-helper syntax "
                         "(ext::, fd::...), which is refused: use https://, ssh:// or git@host:path")
    scheme = _SCHEME.match(url)
    if scheme is not None:
        name = scheme.group(1).lower()
        if name == "file":
            return _local_path(urlsplit(url).path, local_roots)
        if name not in REMOTE_SCHEMES:
            raise BadRequest(f"repository URL scheme {name!r} is refused: use {', '.join(REMOTE_SCHEMES)}")
        return url
    if _SCP_LIKE.match(url):
        return url
    return _local_path(url, local_roots)


def _local_path(path: str, local_roots: Sequence[Path]) -> str:
    if not Path(path).is_absolute():
        raise BadRequest(f"local repository path {path!r} must be absolute")
    resolved = Path(path).resolve()
    if not any(resolved.is_relative_to(root) for root in local_roots):
        allowed = ", ".join(map(str, local_roots)) or "none are allowed (PERFBISECT_LOCAL_REPO_ROOTS is empty)"
        raise BadRequest(f"local repository path {path!r} is outside the allowed roots: {allowed}")
    return str(resolved)


def remote_host(url: str) -> str | None:
    """The host a checked remote URL connects to (None for a local path)."""
    if _SCHEME.match(url):
        return urlsplit(url).hostname
    if _SCP_LIKE.match(url):
        return url.split("@", 1)[1].split(":", 1)[0]
    return None


def public_url(url: str) -> str:
    """`url` without a password or token in its user part (https://user:token@host/... ->
    https://user:***@host/...), for anyone but an admin."""
    if _SCHEME.match(url) is None:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
