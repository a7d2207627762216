"""Writing the demo repositories' histories with plain git: no user or system configuration, no
signing, fixed authors and dates, so the same writer gives the same commits on every machine."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    base.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, **(env or {}))
    done = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false",
                           "-c", "init.defaultBranch=main", *args], cwd=repo, env=base,
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit_all(repo: Path, subject: str, name: str, email: str, when: int) -> str:
    """Commit everything in the work tree as `name <email>` at epoch second `when`; its sha."""
    date = f"@{when} +0000"
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject,
        env={"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date,
             "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": date})
    return git(repo, "rev-parse", "HEAD")
