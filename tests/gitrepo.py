"""Build small git repositories for tests with plain git, so shas and history are real."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git(path: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, subjects: list[str]) -> list[str]:
    """A linear history, one file changed per commit; returns the shas oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    shas = []
    for i, subject in enumerate(subjects):
        (path / "history.txt").write_text(f"{i}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", subject)
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas
