"""A repository's dependencies (issue 44): checked at registration against the mirrors, and read
at a commit (its pins, the pins a commit moved). The reading rules are pure (pins.py); this
module feeds them from git. Local git reads only, except the registration's clones.

Registration refuses, as a 422 with nothing written: a dependency whose repository is not
registered, a pin pattern that matches nothing at the default branch's tip, a pin that is not a
commit of the dependency's repository, and a submodule whose URL no registered repository has.
A submodule of a registered repository needs no declaration: it is added as one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from perfbisect.gitrepo import GitError, Mirror
from perfbisect.service.bisect.descent import Bump
from perfbisect.service.errors import BadRequest
from perfbisect.service.models import Repository
from perfbisect.service.repos import pins, repository
from perfbisect.service.repos.schemas import Dependency, PinLocation
from perfbisect.service.toolchains.rules import same_package


def declared(repo: Repository) -> list[Dependency]:
    """The typed dependencies of a registered repository."""
    return [Dependency.model_validate(d) for d in repo.dependencies or ()]


def for_package(repo: Repository, package: str) -> Dependency | None:
    """The dependency `repo` declares for Python package `package` (a toolchain bisect's): the one
    of that name, compared as PEP 503 normalises names ("Tiny_Op" is "tinyop")."""
    return next((d for d in declared(repo) if same_package(d.name, package)), None)


def pin_at(mirror: Mirror, sha: str, pin: PinLocation) -> str:
    """The pin at commit `sha`. Raises PinError (not there) or GitError (no such file)."""
    if pin.kind == "submodule":
        return pins.gitlink(mirror.ls_tree(sha, pin.file), pin.file)
    return pins.extract(pin.kind, pin.key, mirror.read_file(sha, pin.file), pin.file)


def pin_commit(mirror: Mirror, pin: str, tag: str | None = None) -> str | None:
    """The dependency's commit a pin names: the pin itself (a sha, a tag) or, for a version,
    its tag (`tag` with {version} filled in, else `v<version>`: pins.tag_names); None when none
    is a commit of the mirror."""
    for ref in dict.fromkeys([pin, *pins.tag_names(pin, tag)]):
        try:
            if mirror.has_commit(ref):
                return mirror.resolve(ref)
        except GitError:
            continue
    return None


def registered(session: Session, name: str) -> Repository:
    dep = repository.get_by_name(session, name)
    if dep is None:
        raise BadRequest(f"dependency repository {name!r} is not registered: register it first "
                         "(POST /api/repositories, or `perfbisect repo add`)")
    return dep


def _submodules(session: Session, mirror: Mirror, tip: str, declared_paths: set[str]) -> list[Dependency]:
    """The submodules at `tip` not declared, as dependencies on the registered repository of their
    URL. Raises BadRequest for a URL no registered repository has."""
    from perfbisect.service.webhooks.repo_urls import normalized_url  # pure; webhooks imports repos at module level

    try:
        modules = pins.gitmodules(mirror.read_file(tip, ".gitmodules"))
    except GitError:
        return []  # no .gitmodules: no submodule
    found = []
    for path, url in sorted(modules.items()):
        if path in declared_paths:
            continue
        owner = next((r for r in repository.list_all(session) if normalized_url(r.url) == normalized_url(url)), None)
        if owner is None:
            raise BadRequest(f"submodule {path} points at {url}, which is not a registered repository: register "
                             "it first, so a bump of it can be bisected inside it")
        found.append(Dependency(name=owner.name, repository=owner.name, pin=PinLocation(kind="submodule", file=path)))
    return found


def check(session: Session, mirror: Mirror, branch: str, wanted: Sequence[Dependency],
          mirror_of) -> list[Dependency]:
    """The dependencies to store for a repository being registered (its `mirror` cloned): the
    declared ones, each checked at `branch`'s tip, then the undeclared submodules. `mirror_of`
    gives a registered repository's mirror. Raises BadRequest naming the first problem."""
    try:
        tip = mirror.resolve(branch)
    except GitError as exc:
        raise BadRequest(f"dependencies are read at the default branch: {exc}") from exc
    paths = {d.pin.file.strip("/") for d in wanted if d.pin.kind == "submodule"}
    every = list(wanted) + _submodules(session, mirror, tip, paths)
    names = [d.name for d in every]
    if len(set(names)) != len(names):
        raise BadRequest(f"a submodule's repository is also a declared dependency's name: {sorted(names)}")
    for dep in every:
        owner = registered(session, dep.repository)
        try:
            pin = pin_at(mirror, tip, dep.pin)
        except (pins.PinError, GitError) as exc:
            raise BadRequest(f"dependency {dep.name}: the pin matches nothing at {branch}: {exc}") from exc
        dep_mirror = mirror_of(owner)
        try:
            dep_mirror.ensure(fetch=False)
        except GitError as exc:
            raise BadRequest(f"dependency {dep.name}: cannot read {dep.repository}: {exc}") from exc
        if pin_commit(dep_mirror, pin, dep.pin.tag) is None:
            raise BadRequest(f"dependency {dep.name}: the pin {pin!r} at {branch} is not a commit of the "
                             f"registered repository {dep.repository}")
    return every


@dataclass(frozen=True)
class CommitBumps:
    """What commit `sha` of a repository changed: the declared pins it moved, and its other files."""

    bumps: tuple[Bump, ...]
    other_files: tuple[str, ...]


def bumps_of(repo: Repository, mirror: Mirror, parent_sha: str, sha: str) -> CommitBumps:
    """The declared pins commit `sha` moved from its parent `parent_sha` (a pin that appears or
    disappears is no bump), and the files it changed besides the pin files. Local git reads."""
    deps = declared(repo)
    moved = []
    for dep in deps:
        try:
            old, new = pin_at(mirror, parent_sha, dep.pin), pin_at(mirror, sha, dep.pin)
        except (pins.PinError, GitError):
            continue
        if old != new:
            moved.append(Bump(dep.name, old, new))
    pin_files = {d.pin.file.strip("/") for d in deps}
    others = tuple(f for f in mirror.changed_files(parent_sha, sha) if f.strip("/") not in pin_files)
    return CommitBumps(tuple(moved), others)
