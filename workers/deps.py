"""Placing a revision's dependencies in its worktree (issue 44), inside the trial's sandbox slot:
for each declared dependency, the pin the revision names (its submodule gitlink, or its pin
file as checked out) or the commit a descent measures (`pinned`), the dependency's tree at that
commit exported from its mirror to the declared path, its own dependencies likewise inside it,
then its recipe, run contained like the build (workers/build.py:run_build: the slot's user,
limits and namespaces, no network unless the repository opted in).

A revision that does not pin a dependency (older history) simply does not get it; a pin that is
not a commit of the dependency's repository, or a recipe that fails, fails the build.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfbisect.gitrepo import GitError, Mirror
from perfbisect.service.repos import pins
from perfbisect.service.repos.dependencies import pin_commit
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import DependencyWork
from perfbisect.workers.build import run_build
from perfbisect.workers.sandbox import Slot


class PlacementError(Exception):
    """A dependency could not be placed: the message says which and why (a build error)."""


@dataclass(frozen=True)
class Placed:
    key: str  # its path of names from the host ("minicc/minilib")
    sha: str
    path: str  # relative to the worktree


def _pin(dep: DependencyWork, mirror: Mirror, sha: str, tree: Path) -> str | None:
    """The pin of `dep` in the repository at `sha` (checked out at `tree`); None where it pins none."""
    kind, file, key = dep.pin["kind"], dep.pin["file"], dep.pin.get("key")
    try:
        if kind == "submodule":
            return pins.gitlink(mirror.ls_tree(sha, file), file)
        return pins.extract(kind, key, (tree / file).read_text(errors="replace"), file)
    except (pins.PinError, GitError, OSError):
        return None


def _commit(dep: DependencyWork, pin: str) -> tuple[Mirror, str]:
    """The dependency's mirror and the commit `pin` names there (fetched once if it is new)."""
    mirror = Mirror(get_settings().mirrors_dir.resolve(), dep.repo_name, dep.repo_url)
    try:
        mirror.ensure(fetch=False)
        found = pin_commit(mirror, pin, dep.pin.get("tag"))
        if found is None:
            mirror.ensure(fetch=True)
            found = pin_commit(mirror, pin, dep.pin.get("tag"))
    except GitError as exc:
        raise PlacementError(f"dependency {dep.name}: {exc}") from exc
    if found is None:
        raise PlacementError(f"dependency {dep.name}: the pin {pin!r} is not a commit of {dep.repo_name}")
    return mirror, found


def place(box: Slot, deps: Sequence[DependencyWork], mirror: Mirror, sha: str, tree: Path,
          pinned: Mapping[str, str], *, env: dict[str, str], should_stop: Callable[[], bool] | None = None,
          network: bool = False, prefix: str = "") -> list[Placed]:
    """Place `deps` of the repository at `sha` (its tree at `tree`, inside the slot's worktree),
    innermost recipes first. Raises PlacementError."""
    placed: list[Placed] = []
    for dep in deps:
        key = f"{prefix}/{dep.name}" if prefix else dep.name
        pin = pinned.get(key) or _pin(dep, mirror, sha, tree)
        if pin is None:
            continue
        dep_mirror, commit = _commit(dep, pin)
        where = tree / dep.path
        if not where.resolve().is_relative_to(box.worktree.resolve()):
            raise PlacementError(f"dependency {dep.name}: {dep.path} is outside the worktree")
        try:
            dep_mirror.export(commit, where)
        except GitError as exc:
            raise PlacementError(f"dependency {dep.name}: {exc}") from exc
        placed += place(box, dep.inner, dep_mirror, commit, where, pinned, env=env, should_stop=should_stop,
                        network=network, prefix=key)
        if dep.recipe:
            box.give(box.worktree)
            done = run_build(dep.recipe.replace("{dep_dir}", shlex.quote(str(where))), box, env,
                             get_settings().build_timeout_s, should_stop, network)
            if not done.ok:
                raise PlacementError(f"dependency {dep.name}: the recipe failed: {done.log_tail}")
        placed.append(Placed(key, commit, str(where.relative_to(box.worktree))))
    return placed
