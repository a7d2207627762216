"""Git, asv-style: one mirror clone per repository, a clean checkout per revision
(`checkout -f` + `clean -fdx`), re-created when broken; ranges from `rev-list --first-parent`.

Refs from requests are validated before git sees them, so a ref such as `--upload-pack=...`
can never become an option."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
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


class FetchTimeout(GitError):
    """A clone or fetch that did not finish in time (a remote that accepts and never answers)."""


FETCH_REFSPECS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


def shown_url(url: str) -> str:
    """The URL without its user and password, for messages that are stored and shown."""
    return _USERINFO.sub("", url)


def run_git(args: list[str], timeout_s: float | None, cwd: Path | None = None) -> None:
    """Run git with no terminal prompt; past `timeout_s` its whole process group (ssh, remote
    helpers) is killed and FetchTimeout raised. Raises GitError with git's stderr on failure."""
    proc = subprocess.Popen(["git", *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise FetchTimeout(f"timed out after {timeout_s:.0f} s (PERFBISECT_FETCH_TIMEOUT_S)") from None
    if proc.returncode:
        raise GitError(err.decode(errors="replace").strip() or f"git {args[0]} exited {proc.returncode}")


@dataclass(frozen=True)
class FetchStamp:
    """The last clone or fetch of a mirror: when it started, and why it failed (None: it did not)."""

    started: float
    error: str | None


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
def _locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on `path`.lock: worker processes and threads of one node share a
    mirror, and concurrent fetches or `worktree add`s on it would trip over git's own locks.
    Without `wait`, yields False at once when another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Mirror:
    """A bare mirror of one registered repository under `root`."""

    def __init__(self, root: Path, name: str, url: str, timeout_s: float | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s  # a clone or fetch is killed past it (None: never)
        # Keyed by URL too: a name re-registered for another URL never reuses a stale mirror.
        self.path = root / f"{name}-{hashlib.sha1(url.encode()).hexdigest()[:10]}.git"

    def ensure(self, fetch: bool = True, timeout_s: float | None = None) -> git.Repo:
        """Clone the mirror if missing (or broken), else fetch (reading an existing mirror
        takes no lock: git updates refs atomically). Raises GitError, FetchTimeout."""
        if not fetch and (repo := self._open()) is not None:
            return repo
        with _locked(self.path):
            return self._ensure(fetch, timeout_s or self.timeout_s)

    def fetch_once(self, since: float, timeout_s: float) -> FetchStamp | None:
        """Fetch unless a fetch that started at or after `since` (a time.time()) is on record,
        and return the latest one; None, at once, when another process is fetching this remote
        now (one fetch per remote at a time: the caller tries again later)."""
        with _locked(self.path, wait=False) as held:
            if not held:
                return None
            stamp = self.last_fetch()
            if stamp is None or stamp.started < since:
                try:
                    self._ensure(True, timeout_s)
                except GitError:
                    pass  # recorded in the stamp
                stamp = self.last_fetch()
            return stamp

    def fetch_pull(self, number: int, timeout_s: float) -> None:
        """Fetch refs/pull/<number>/head, where GitHub keeps a pull request's head (one from a
        fork lives nowhere else: the regular fetch takes branches and tags only), killed past
        `timeout_s`. Raises GitError (a remote without pull refs), FetchTimeout."""
        ref = f"refs/pull/{int(number)}/head"
        with _locked(self.path):
            run_git(["fetch", "origin", f"+{ref}:{ref}"], timeout_s, cwd=self.path)

    def last_fetch(self) -> FetchStamp | None:
        try:
            data = json.loads(Path(f"{self.path}.fetched").read_text())
            return FetchStamp(float(data["started"]), data.get("error"))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def fresh(self, max_age_s: float) -> bool:
        """Whether the mirror was fetched without error less than `max_age_s` ago."""
        stamp = self.last_fetch()
        return stamp is not None and stamp.error is None and time.time() - stamp.started < max_age_s

    def has_commit(self, ref: str) -> bool:
        """Whether `ref` names a commit of the mirror (no fetch, no lock)."""
        repo = self._open()
        if repo is None:
            return False
        try:
            repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{validate_ref(ref)}^{{commit}}")
            return True
        except (git.GitCommandError, GitError):
            return False

    def _stamp(self, started: float, error: str | None) -> None:
        Path(f"{self.path}.fetched").write_text(json.dumps({"started": started, "error": error}))

    def _open(self) -> git.Repo | None:
        try:
            return git.Repo(self.path) if self.path.exists() else None
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            return None

    def _ensure(self, fetch: bool, timeout_s: float | None) -> git.Repo:
        started = time.time()
        try:
            repo, fetched = self._clone_or_fetch(fetch, timeout_s)
        except GitError as exc:
            self._stamp(started, str(exc))
            raise
        if fetched:
            self._stamp(started, None)
        return repo

    def _clone_or_fetch(self, fetch: bool, timeout_s: float | None) -> tuple[git.Repo, bool]:
        """The mirror and whether it was cloned or fetched now."""
        url = shown_url(self.url)
        repo = self._open()
        if repo is not None:
            if not fetch:
                return repo, False
            try:
                run_git(["fetch", "--prune", "origin", *FETCH_REFSPECS], timeout_s, cwd=self.path)
                return repo, True
            except FetchTimeout as exc:  # the remote hangs: the mirror is fine, keep it
                raise FetchTimeout(f"fetching {url} {exc}") from exc
            except GitError:
                pass  # re-created from scratch below
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            run_git(["clone", "--mirror", "--", self.url, str(self.path)], timeout_s)
        except GitError as exc:
            shutil.rmtree(self.path, ignore_errors=True)  # a rejected URL leaves no partial mirror
            kind = FetchTimeout if isinstance(exc, FetchTimeout) else GitError
            raise kind(f"cannot clone {url}: {exc}") from exc
        return git.Repo(self.path), True

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

    def merge_base(self, a: str, b: str) -> str:
        """The best common ancestor of two commits (`git merge-base`, local). Raises GitError
        when they share none."""
        try:
            return self.ensure(fetch=False).git.merge_base("--end-of-options", a, b).strip()
        except git.GitCommandError as exc:
            raise GitError(f"{a[:12]} and {b[:12]} have no common ancestor") from exc

    def count_first_parent(self, good_sha: str, bad_sha: str) -> int:
        repo = self.ensure(fetch=False)
        return int(repo.git.rev_list("--first-parent", "--count", f"{good_sha}..{bad_sha}"))

    def changed_paths(self, good_sha: str, bad_sha: str) -> dict[str, list[str]]:
        """The paths each first-parent commit of good..bad changed against its first parent,
        by sha (one `git log`, no checkout). Raises GitError."""
        try:
            out = self.ensure(fetch=False).git.log("--first-parent", "--diff-merges=first-parent", "--name-only",
                                                   "--format=@%H", "--end-of-options", f"{good_sha}..{bad_sha}")
        except git.GitCommandError as exc:
            raise GitError(f"cannot list the changes of {good_sha[:12]}..{bad_sha[:12]}: {exc}") from exc
        paths: dict[str, list[str]] = {}
        current: list[str] = []
        for line in out.splitlines():
            if line.startswith("@"):
                current = paths.setdefault(line[1:].strip(), [])
            elif line.strip():
                current.append(line.strip())
        return paths

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

    def _git(self, *args: str) -> str:
        """A local read of the mirror (`git <args>`); raises GitError with git's own words."""
        try:
            return self.ensure(fetch=False).git.execute(["git", *args], strip_newline_in_stdout=False)
        except git.GitCommandError as exc:
            raise GitError((exc.stderr or str(exc)).strip().removeprefix("stderr:").strip(" '")) from exc

    def read_file(self, sha: str, path: str) -> str:
        """The text of `path` at commit `sha` (`git show sha:path`). Raises GitError when absent."""
        try:
            return self._git("show", f"{validate_ref(sha)}:{path}")
        except GitError as exc:
            raise GitError(f"{path} is not in {sha[:12]}: {exc}") from exc

    def ls_tree(self, sha: str, path: str) -> str:
        """`git ls-tree sha -- path`: the entry of `path` (a submodule's gitlink line)."""
        return self._git("ls-tree", "--end-of-options", validate_ref(sha), "--", path)

    def diff_raw(self, old: str, new: str) -> str:
        """`git diff --raw` of two commits, full object names (submodule gitlinks included)."""
        return self._git("diff", "--raw", "--no-abbrev", "--no-renames", "--end-of-options",
                         validate_ref(old), validate_ref(new))

    def changed_files(self, old: str, new: str) -> list[str]:
        return [line.partition("\t")[2] for line in self.diff_raw(old, new).splitlines() if "\t" in line]

    def export(self, sha: str, dest: Path) -> Path:
        """The tree of `sha` written to `dest` (wiped first), without a .git: a dependency placed
        inside a revision's worktree. Raises GitError."""
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        repo = self.ensure(fetch=False)
        with tempfile.TemporaryDirectory() as scratch:  # an index of its own: the mirror's is never touched
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            try:
                repo.git.read_tree("--end-of-options", validate_ref(sha), env=env)
                repo.git.execute(["git", f"--work-tree={dest}", "checkout-index", "-a", "-f"], env={**os.environ, **env})
            except git.GitCommandError as exc:
                raise GitError(f"cannot export {sha[:12]} of {shown_url(self.url)}: {exc}") from exc
        return dest

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


    def culprit_diff(self, first: str, last: str) -> str:
        """The first-parent diff of a culprit (first, last): `git diff -M first^1 last`, the
        combined diff of a range of several commits, a merge's change against its first parent
        (a root commit against the empty tree). Text diffs only (binary files say so)."""
        repo = self.ensure(fetch=False)
        empty = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree
        parents = repo.commit(validate_ref(first)).parents
        base = parents[0].hexsha if parents else empty
        try:
            return repo.git.diff("-M", "--no-color", "--no-ext-diff", "--end-of-options", base, validate_ref(last))
        except git.GitCommandError as exc:
            raise GitError(f"cannot diff {first[:12]}..{last[:12]}: {exc.stderr.strip() or exc}") from exc


def apply_patch(worktree: Path, patch: str) -> None:
    """Apply `patch` (a subset of a culprit's hunks, service/bisect/hunks.py:subset_patch) to the
    checked-out `worktree` without committing. Raises PatchDoesNotApply with git's words, the
    worktree left as it was (`git apply --check` first)."""
    tree = git.Repo(worktree)
    for check in (True, False):
        try:
            tree.git.apply(*(["--check"] if check else []), "--whitespace=nowarn", "-", istream=_stdin(patch))
        except git.GitCommandError as exc:
            raise PatchDoesNotApply(exc.stderr.strip() or str(exc)) from exc


def _stdin(text: str):
    import tempfile

    handle = tempfile.TemporaryFile()
    handle.write(text.encode())
    handle.seek(0)
    return handle


class PatchDoesNotApply(GitError):
    """A subset of a culprit's hunks does not apply on its parent (recorded, never blamed)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the hunks do not apply on the parent: {detail.splitlines()[-1] if detail else ''}")


def _forget_revert(tree: git.Repo) -> None:
    """Drop any revert in progress (its state, not the changes): a worktree reused after a
    variant's trial must accept the next revert or checkout."""
    try:
        tree.git.revert("--quit")
    except git.GitCommandError:
        pass
