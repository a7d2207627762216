"""Rebuild a linear history of a real repository with only some paths kept, for a bisect of a
snapshot that lacks some blobs (bench/RESULTS.md, "A real library on the H200").

Each first-parent commit of GOOD..BAD (GOOD included) becomes one commit of a new repository
holding only PATHS as they were at that commit (`git archive`, so only their blobs are read),
with the original author, committer, dates and message, and an `Original-commit: <sha>` trailer.
The PR numbers stay in the subjects, where perfbisect reads them.

    python bench/real_history.py /work/.mirror/linkedin+Liger-Kernel/repo c4b16d43 8d03e969 \\
        .real/liger src/liger_kernel pyproject.toml setup.py

The output directory must not exist. Prints one line per commit (new sha, original sha, subject).
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path


def git(repo: Path | str, *args: str, env: dict | None = None, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          env=env, input=input).stdout


def first_parent_range(source: Path, good: str, bad: str) -> list[str]:
    good_sha = git(source, "rev-parse", "--verify", f"{good}^{{commit}}").decode().strip()
    newer = git(source, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad}").decode().split()
    if not newer:
        raise SystemExit(f"no first-parent commits in {good}..{bad}")
    # rev-list excludes everything reachable from GOOD; check GOOD is on BAD's first-parent line
    chain = git(source, "rev-list", "--first-parent", bad).decode().split()
    if good_sha not in chain:
        raise SystemExit(f"{good} is not on the first-parent line of {bad}")
    return [good_sha, *newer]


def present_paths(source: Path, sha: str, paths: list[str]) -> list[str]:
    listed = git(source, "ls-tree", "--name-only", sha, "--", *paths).decode().split("\n")
    return [p for p in listed if p]


def rebuild(source: Path, good: str, bad: str, out: Path, paths: list[str]) -> list[tuple[str, str, str]]:
    if out.exists():
        raise SystemExit(f"{out} exists; remove it first")
    shas = first_parent_range(source, good, bad)
    out.mkdir(parents=True)
    git(out, "init", "-q", "-b", "main")
    rows = []
    for sha in shas:
        for entry in out.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        kept = present_paths(source, sha, paths)
        if kept:
            archive = git(source, "archive", "--format=tar", sha, "--", *kept)
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                # the "tar" filter (no absolute paths, no links out) where Python has it (3.11.4+)
                tar.extractall(out, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        fmt = "%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B"
        an, ae, ad, cn, ce, cd, message = git(source, "show", "-s", f"--format={fmt}", sha).decode().split("\0", 6)
        env = {**os.environ, "GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
               "GIT_COMMITTER_NAME": cn, "GIT_COMMITTER_EMAIL": ce, "GIT_COMMITTER_DATE": cd}
        message = message.rstrip("\n") + f"\n\nOriginal-commit: {sha}\n"
        git(out, "add", "-A")
        git(out, "commit", "-q", "--allow-empty", "--no-verify", "-F", "-", env=env, input=message.encode())
        new = git(out, "rev-parse", "HEAD").decode().strip()
        rows.append((new, sha, message.split("\n", 1)[0]))
    git(out, "gc", "-q", "--aggressive", "--prune=now")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="git directory (bare or not) holding the history")
    parser.add_argument("good", help="oldest commit (kept)")
    parser.add_argument("bad", help="newest commit")
    parser.add_argument("out", type=Path, help="new repository (must not exist)")
    parser.add_argument("paths", nargs="+", help="paths to keep at every commit")
    args = parser.parse_args(argv)
    rows = rebuild(args.source, args.good, args.bad, args.out, args.paths)
    for new, old, subject in rows:
        print(f"{new[:10]} {old[:10]} {subject}")
    print(f"{len(rows)} commits in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
