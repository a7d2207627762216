"""Git, asv-style: one mirror clone per repository, a clean checkout per revision
(`checkout -f` + `clean -fdx`), re-created when broken; ranges from `rev-list --first-parent`.

Refs from requests are validated before git sees them, so a ref such as `--upload-pack=...`
can never become an option."""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import git

_REF_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/@{}~^+-]{0,254}$")
# Where a commit names its pull (or merge) request: a squash merge's subject ends "(#123)";
# GitHub's merge commit subject is "Merge pull request #123 from owner/branch"; GitLab's merge
# commit body has a line "See merge request group/project!123".
_SUBJECT_PR = (re.compile(r"\(#(\d+)\)\s*$"), re.compile(r"^Merge pull request #(\d+)\b"))
_BODY_PR = re.compile(r"^See merge request \S*!(\d+)\s*$", re.MULTILINE)


class GitError(Exception):
    """A ref that does not resolve, a range that is not a range, a clone that failed."""


class RevertConflict(GitError):
    """A culprit's change does not revert cleanly at the checked-out commit: a later change
    touched the same lines. `files` are the conflicting paths."""

    def __init__(self, files: list[str]) -> None:
        self.files = files
        super().__init__("does not revert cleanly at the head: conflicts in " + (", ".join(files) or "the index"))


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    parent_sha: str | None
    author: str
    authored_at: datetime
    subject: str
    pr_number: int | None
    position: int | None = None  # first-parent depth (0 = root); None for a commit off the branch


@dataclass(frozen=True)
class TreeEntry:
    """One file (or submodule) of a revision's tree."""

    path: str
    oid: str          # the git object id of its content
    size: int | None  # bytes of a file; None for a submodule


def validate_ref(ref: str) -> str:
    """Return `ref` if it is shaped like a git ref, sha or rev expression; raise GitError."""
    if not isinstance(ref, str) or not _REF_RE.match(ref) or ".." in ref or ref.endswith((".lock", "/")):
        raise GitError(f"invalid ref {ref!r}: refs are names like 'main', 'v1.2', a sha or 'HEAD~3'")
    return ref


def pr_number(subject: str, body: str = "") -> int | None:
    """The pull or merge request a commit came from, by its subject or (GitLab) its body."""
    for match in (*(p.search(subject) for p in _SUBJECT_PR), _BODY_PR.search(body)):
        if match:
            return int(match.group(1))
    return None


def _commit_info(commit: git.Commit) -> CommitInfo:
    subject, _, body = (commit.message or "").partition("\n")
    return CommitInfo(
        sha=commit.hexsha,
        parent_sha=commit.parents[0].hexsha if commit.parents else None,
        author=commit.author.name or "",
        authored_at=commit.authored_datetime,
        subject=subject,
        pr_number=pr_number(subject, body),
    )


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`.lock: worker processes and threads of one node share a
    mirror, and concurrent fetches or `worktree add`s on it would trip over git's own locks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Mirror:
    """A bare mirror of one registered repository under `root`."""

    def __init__(self, root: Path, name: str, url: str) -> None:
        self.url = url
        # Keyed by URL too: a name re-registered for another URL never reuses a stale mirror.
        self.path = root / f"{name}-{hashlib.sha1(url.encode()).hexdigest()[:10]}.git"

    def ensure(self, fetch: bool = True) -> git.Repo:
        """Clone the mirror if missing (or broken), else fetch. Raises GitError."""
        with _locked(self.path):
            return self._ensure(fetch)

    def _ensure(self, fetch: bool) -> git.Repo:
        try:
            if self.path.exists():
                repo = git.Repo(self.path)
                if fetch:
                    repo.git.fetch("--prune", "origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
                return repo
        except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError):
            shutil.rmtree(self.path, ignore_errors=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return git.Repo.clone_from(self.url, self.path, mirror=True)
        except git.GitCommandError as exc:
            shutil.rmtree(self.path, ignore_errors=True)  # a rejected URL leaves no partial mirror
            raise GitError(f"cannot clone {self.url}: {exc.stderr.strip() or exc}") from exc

    def resolve(self, ref: str) -> str:
        repo = self.ensure(fetch=False)
        try:
            return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{validate_ref(ref)}^{{commit}}")
        except git.GitCommandError as exc:
            raise GitError(f"ref {ref!r} does not resolve to a commit in {self.url}") from exc

    def first_parent_range(self, good_sha: str, bad_sha: str) -> list[CommitInfo]:
        """good followed by the first-parent commits of good..bad, oldest first. Raises GitError
        when bad does not descend from good."""
        repo = self.ensure(fetch=False)
        if good_sha == bad_sha:
            raise GitError("good and bad are the same commit: there is nothing to bisect")
        if not repo.is_ancestor(good_sha, bad_sha):
            raise GitError(f"bad {bad_sha[:12]} is not a descendant of good {good_sha[:12]}")
        shas = repo.git.rev_list("--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()
        if not shas:
            raise GitError("the range good..bad holds no first-parent commits")
        depth = self.first_parent_depth(good_sha)
        return [replace(_commit_info(repo.commit(sha)), position=depth + i) for i, sha in enumerate([good_sha, *shas])]

    def first_parent_depth(self, sha: str) -> int:
        """How many first-parent ancestors `sha` has: its position on its branch's history."""
        return int(self.ensure(fetch=False).git.rev_list("--first-parent", "--count", sha)) - 1

    def count_first_parent(self, good_sha: str, bad_sha: str) -> int:
        repo = self.ensure(fetch=False)
        return int(repo.git.rev_list("--first-parent", "--count", f"{good_sha}..{bad_sha}"))

    def tree_entries(self, sha: str) -> list[TreeEntry]:
        """Every file of `sha`'s tree with its object id and size (`git ls-tree -r -l`: object
        headers only, no checkout). Raises GitError."""
        repo = self.ensure(fetch=False)
        try:
            listing = repo.git.ls_tree("-r", "-l", "-z", "--full-tree", "--end-of-options", sha)
        except git.GitCommandError as exc:
            raise GitError(f"cannot list the tree of {sha[:12]}: {exc.stderr.strip() or exc}") from exc
        entries = []
        for line in filter(None, listing.split("\0")):
            meta, path = line.split("\t", 1)
            _mode, _kind, oid, size = meta.split()
            entries.append(TreeEntry(path, oid, int(size) if size.isdigit() else None))
        return entries

    def commit_info(self, sha: str) -> CommitInfo:
        return _commit_info(self.ensure(fetch=False).commit(sha))

    def checkout(self, worktree: Path, sha: str) -> Path:
        """A clean tree of `sha` at `worktree`: reused between revisions (checkout -f, clean -fdx),
        re-created from the mirror when it is broken."""
        repo = self.ensure(fetch=False)
        for attempt in range(2):
            try:
                if not (worktree / ".git").exists():
                    shutil.rmtree(worktree, ignore_errors=True)
                    with _locked(self.path):
                        repo.git.worktree("prune")
                        worktree.parent.mkdir(parents=True, exist_ok=True)
                        # twice: a worker killed inside `worktree add` leaves the path registered,
                        # missing and locked ("initializing"), which prune keeps and one --force refuses;
                        # the slot is this worker's alone, so nobody else's worktree is overridden
                        repo.git.worktree("add", "--detach", "--force", "--force", str(worktree), sha)
                tree = git.Repo(worktree)
                _forget_revert(tree)
                tree.git.checkout("-f", "--detach", sha)
                tree.git.clean("-fdxq")
                return worktree
            except (git.GitCommandError, git.InvalidGitRepositoryError) as exc:
                shutil.rmtree(worktree, ignore_errors=True)
                if attempt:
                    raise GitError(f"cannot check out {sha[:12]}: {exc}") from exc
        return worktree

    def revert(self, worktree: Path, ranges: Sequence[tuple[str, str]]) -> None:
        """Revert each culprit (first, last) of `ranges` (oldest first, as on the branch) in the
        checked-out `worktree` without committing (`git revert --no-commit`; a range reverts
        first^..last), newest first so that later changes come off before the ones under them.
        Raises RevertConflict with the conflicting files, the worktree then back at its commit."""
        tree = git.Repo(worktree)
        for first, last in reversed(list(ranges)):
            spec = [last] if first == last else [f"{validate_ref(first)}^..{validate_ref(last)}"]
            try:
                tree.git.revert("--no-commit", "--no-edit", "--end-of-options", *spec)
            except git.GitCommandError as exc:
                files = tree.git.diff("--name-only", "--diff-filter=U").split()
                _forget_revert(tree)
                tree.git.reset("--hard", "-q")
                if not files:
                    raise GitError(f"cannot revert {first[:12]}..{last[:12]}: {exc.stderr.strip() or exc}") from exc
                raise RevertConflict(files) from exc
            _forget_revert(tree)  # a range leaves the sequencer's state behind; the next revert needs it gone


def _forget_revert(tree: git.Repo) -> None:
    """Drop any revert in progress (its state, not the changes): a worktree reused after a
    variant's trial must accept the next revert or checkout."""
    try:
        tree.git.revert("--quit")
    except git.GitCommandError:
        pass
