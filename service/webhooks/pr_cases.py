"""What a pull request is compared on: the cases configured for the branch it targets, plus the
cases whose kernel source it touches. Reads only (and the mirror, for the PR's changed files).

1. the benchmark set named by the repository's `pr_policy.benchmark_set`; else
2. the cases of the tracked branch the PR targets (every device class of it); else
3. every case configured on the repository: its benchmark sets and tracked branches (all of them);
plus, where `pr_policy.kernel_paths` maps a glob (or directory) the PR touches to suites or case
names, those cases among everything configured on the repository (known once the PR's head is in
the mirror: for a head the mirror does not hold yet, the job's resolving task adds them). Never
"the cases of the last job": what was bisected last says nothing about what this PR changed.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import git
from sqlalchemy.orm import Session

from perfbisect.gitrepo import GitError
from perfbisect.service.models import Repository, TrackedBranch
from perfbisect.service.repos import service as repos
from perfbisect.service.suites import repository as suites_repo
from perfbisect.service.suites import service as suites
from perfbisect.service.tracking import repository as tracking_repo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrBenchmarks:
    cases: list[dict[str, Any]]
    device_class: str | None  # None: CompareCreate's default
    min_effect: float | None
    metric: str | None
    source: str  # what the cases came from, for messages
    paths_pending: bool = False  # the PR's changed files are not known yet: mapped once the task fetched


def _unique(cases: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple, dict[str, Any]] = {}
    for case in cases:
        seen.setdefault((case.get("suite"), case.get("target"), case.get("name")), case)
    return list(seen.values())


def touched(paths: Sequence[str], pattern: str) -> bool:
    """A changed path matches a glob, or lies under a directory (with or without a trailing '/')."""
    directory = pattern.rstrip("/")
    return any(fnmatch.fnmatchcase(p, pattern) or p == directory or p.startswith(directory + "/") for p in paths)


def mapped_cases(kernel_paths: dict[str, list[str]], paths: Sequence[str],
                 candidates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidates whose suite or name a touched glob maps to."""
    wanted = {s for pattern, selectors in kernel_paths.items() if touched(paths, pattern) for s in selectors}
    return [c for c in candidates if c.get("suite") in wanted or c.get("name") in wanted]


def changed_paths(repo: Repository, base: str, head: str) -> list[str] | None:
    """Files the PR changes (base...head in the mirror as it is: no fetch); None when a side is
    not in the mirror yet (the webhook does not fetch: the job's task does, then maps them)."""
    try:
        return repos.mirror_of(repo).ensure(fetch=False).git.diff("--name-only", f"{base}...{head}", "--").split("\n")
    except (GitError, git.GitCommandError) as exc:
        log.info("no diff %s...%s in %s yet: %s", base[:10], head[:10], repo.name, exc)
        return None


def configured_cases(session: Session, repo: Repository) -> list[dict[str, Any]]:
    """Every case configured on the repository: its benchmark sets and tracked branches."""
    return _unique([c for s in suites_repo.sets_of(session, repo.id) for c in s.cases]
                   + [c for t in tracking_repo.of_repository(session, repo.id) for c in t.cases])


def with_touched_cases(session: Session, repo: Repository, cases: list[dict[str, Any]], base: str,
                       head: str) -> list[dict[str, Any]] | None:
    """`cases` plus those pr_policy.kernel_paths maps the PR's changed files to; None when the
    mirror does not hold both sides yet."""
    kernel_paths = (repo.pr_policy or {}).get("kernel_paths")
    if not kernel_paths:
        return cases
    paths = changed_paths(repo, base, head)
    if paths is None:
        return None
    return _unique([*cases, *mapped_cases(kernel_paths, paths, configured_cases(session, repo))])


def _setting(branches: Sequence[TrackedBranch], policy: dict[str, Any], key: str, branch_key: str | None = None):
    if policy.get(key) is not None:
        return policy[key]
    return getattr(branches[0], branch_key or key) if branches else None


def pr_benchmarks(session: Session, repo: Repository, base_ref: str, base: str, head: str) -> PrBenchmarks:
    """The cases (and device class, minimum effect, metric) a PR into `base_ref` is compared on.
    Empty cases when the repository configures none."""
    policy = repo.pr_policy or {}
    branches = tracking_repo.of_repository(session, repo.id)
    on_base = [t for t in branches if t.branch == base_ref]
    if policy.get("benchmark_set"):
        cases, source = list(suites.get_set(session, repo, policy["benchmark_set"]).cases), \
            f"benchmark set {policy['benchmark_set']!r}"
    elif on_base:
        cases, source = _unique(c for t in on_base for c in t.cases), f"tracked branch {base_ref!r}"
    else:
        cases, source = configured_cases(session, repo), "every benchmark set and tracked branch"
    touched = with_touched_cases(session, repo, cases, base, head)
    settings_from = on_base or branches
    return PrBenchmarks(touched or cases, _setting(settings_from, policy, "device_class"),
                        _setting(settings_from, policy, "min_effect", "min_magnitude"),
                        _setting(settings_from, {}, "metric"), source, paths_pending=touched is None)
