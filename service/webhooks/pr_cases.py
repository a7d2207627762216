"""What a pull request is compared on: the cases configured for the branch it targets, plus the
cases whose kernel source it touches. Reads only (and the mirror, for the PR's changed files).

1. the benchmark set named by the repository's `pr_policy.benchmark_set`; else
2. the cases of the tracked branch the PR targets (every device class of it); else
3. every case configured on the repository: its benchmark sets and tracked branches (all of them);
plus, where `pr_policy.kernel_paths` maps a glob (or directory) the PR touches to suites or case
names, those cases among everything configured on the repository. Never "the cases of the last
job": what was bisected last says nothing about what this PR changed.
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


def changed_paths(repo: Repository, base: str, head: str) -> list[str]:
    """Files the PR changes (base...head in the mirror); [] when a side does not resolve yet
    (submit_compare then says which)."""
    mirror = repos.mirror_of(repo)
    for fetch in (False, True):  # a head pushed since the last fetch (a local remote has no pull refs)
        try:
            return mirror.ensure(fetch=fetch).git.diff("--name-only", f"{base}...{head}", "--").split("\n")
        except (GitError, git.GitCommandError) as exc:
            log.info("no diff %s...%s in %s (fetched: %s): %s", base[:10], head[:10], repo.name, fetch, exc)
    return []


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
    everything = _unique([c for s in suites_repo.sets_of(session, repo.id) for c in s.cases]
                         + [c for t in branches for c in t.cases])
    if policy.get("benchmark_set"):
        cases, source = list(suites.get_set(session, repo, policy["benchmark_set"]).cases), \
            f"benchmark set {policy['benchmark_set']!r}"
    elif on_base:
        cases, source = _unique(c for t in on_base for c in t.cases), f"tracked branch {base_ref!r}"
    else:
        cases, source = everything, "every benchmark set and tracked branch"
    if policy.get("kernel_paths"):
        extra = mapped_cases(policy["kernel_paths"], changed_paths(repo, base, head), everything)
        cases = _unique([*cases, *extra])
    settings_from = on_base or branches
    return PrBenchmarks(cases, _setting(settings_from, policy, "device_class"),
                        _setting(settings_from, policy, "min_effect", "min_magnitude"),
                        _setting(settings_from, {}, "metric"), source)
