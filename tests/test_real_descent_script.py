"""bench/real_descent.py's repository building (issue 44's real CPU case), on a tiny synthetic
library instead of the fetched Pygments snapshot (not in CI): the ancestry chain through a culprit
across a merge whose first parent does not hold it, the rebuilt linear history with its transform
and `Original-commit:` trailers, and the host that vendors the library as a submodule and bumps it.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bench.real_descent import SUBMODULE, build_host, chain_through, rebuild_library

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=ENV).stdout.strip()


def commit(repo: Path, subject: str, text: str) -> str:
    (repo / "lib").mkdir(exist_ok=True)
    (repo / "lib" / "core.py").write_text(text)
    (repo / "NOTES").write_text(subject)  # outside the kept path
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD")


def synthetic_library(path: Path) -> dict[str, str]:
    """a - b - culprit - d on main; a fork from d merged with the fork as first parent (as the
    Mercurial conversion's merges are), then e."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    shas = {"a": commit(path, "a", "FAST = True\n"), "b": commit(path, "b", "FAST = True\n# b\n"),
            "culprit": commit(path, "culprit: the slow path", "FAST = False\n# b\n"),
            "d": commit(path, "d", "FAST = False\n# d\n")}
    git(path, "checkout", "-q", "-b", "fork", shas["b"])
    shas["fork"] = commit(path, "fork work", "FAST = True\n# fork\n")
    git(path, "merge", "-q", "--no-ff", "-X", "theirs", "-m", "merge main into fork", "main")
    shas["merge"] = git(path, "rev-parse", "HEAD")
    shas["e"] = commit(path, "e", "FAST = False\n# e\n")
    return shas


def test_chain_through_takes_the_parent_that_holds_the_culprit(tmp_path: Path) -> None:
    shas = synthetic_library(tmp_path / "lib")
    chain = chain_through(tmp_path / "lib", shas["culprit"], 1, 10, shas["e"])
    # the merge's first parent is the fork (no culprit): the chain goes through d instead
    assert chain == [shas["b"], shas["culprit"], shas["d"], shas["merge"], shas["e"]]
    assert chain_through(tmp_path / "lib", shas["culprit"], 2, 1, shas["e"]) == [
        shas["a"], shas["b"], shas["culprit"], shas["d"]]


def test_rebuilt_history_keeps_the_path_transformed_with_trailers(tmp_path: Path) -> None:
    shas = synthetic_library(tmp_path / "lib")
    chain = chain_through(tmp_path / "lib", shas["culprit"], 2, 2, shas["e"])
    seen: list[str] = []

    def upper(text: str, cache: dict, blob: str, name: str) -> str:
        seen.append(name)
        return cache.setdefault(blob, text.replace("# ", "# T "))

    rows = rebuild_library(tmp_path / "lib", chain, tmp_path / "linear", keep="lib", transform=upper)
    linear = tmp_path / "linear"
    assert [old for _, old, _ in rows] == chain
    assert git(linear, "rev-list", "--first-parent", "--count", "HEAD") == str(len(chain))
    assert git(linear, "ls-tree", "-r", "--name-only", "HEAD") == "lib/core.py"  # NOTES left out
    assert git(linear, "show", f"{rows[2][0]}:lib/core.py") == "FAST = False\n# T b"
    assert git(linear, "show", "-s", "--format=%s", rows[2][0]) == "culprit: the slow path"
    assert f"Original-commit: {shas['culprit']}" in git(linear, "show", "-s", "--format=%B", rows[2][0])
    assert seen == ["lib/core.py"] * len(chain)


def test_host_vendors_the_library_and_bumps_it_once(tmp_path: Path) -> None:
    shas = synthetic_library(tmp_path / "lib")
    rows = rebuild_library(tmp_path / "lib", chain_through(tmp_path / "lib", shas["culprit"], 2, 2, shas["e"]),
                           tmp_path / "linear", keep="lib")
    old, new = rows[0][0], rows[-1][0]
    host_rows = build_host(tmp_path / "host", tmp_path / "linear", old, new)
    host = tmp_path / "host"
    assert len(host_rows) == 5
    pins = []
    for sha, _ in host_rows:
        mode, kind, pinned = git(host, "ls-tree", sha, SUBMODULE).split("\t")[0].split()
        assert (mode, kind) == ("160000", "commit")
        pins.append(pinned)
    assert pins == [old, old, old, new, new]
    assert host_rows[3][1] == f"bump vendored pygments {old[:10]}..{new[:10]}"
    # only the bump moves the pin; the other host commits change host files alone
    changed = git(host, "diff-tree", "--no-commit-id", "--name-only", "-r", host_rows[3][0])
    assert changed == SUBMODULE
    assert f"url = {(tmp_path / 'linear').resolve()}" in git(host, "show", f"{host_rows[0][0]}:.gitmodules")
    assert git(host, "rev-list", "--count", "HEAD") == "5"
    for path in ("hostapp/__init__.py", "hostapp/highlight.py", "bench/lex_suite.py"):
        assert git(host, "cat-file", "-t", f"{host_rows[0][0]}:{path}") == "blob"
