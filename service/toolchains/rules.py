"""The toolchain axis (issue 44), PURE: a bisect over prebuilt versions of a package at one commit.
What `--toolchain` says (`parse`), which wheels of a wheelhouse it names (`select`), in version
order (`ordered`), and the label a version goes by as a job's revision (`label`, `version_of`).
No files: the service lists the wheelhouse and hands the names in (service/jobs/toolchain.py);
tests/test_toolchain_rules.py pins the rules on literal lists.

The forms of `--toolchain`:
- `PACKAGE==V1,V2,...`: these versions, in the order given (each must be a wheel of the wheelhouse);
- `PACKAGE>=V1,<=V2` (any PEP 440 specifier set): the wheelhouse's versions in it, in version order;
- `PACKAGE`: every version of the wheelhouse, in version order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
MAX_VERSIONS = 64
MAX_LABEL = 64  # a label is a job's revision (revisions.sha is 64 characters)


class ToolchainError(ValueError):
    """The spec or the wheelhouse does not name two versions to bisect: the message says why."""


@dataclass(frozen=True)
class Ask:
    """What `--toolchain` asked for: a package and either its listed versions or a specifier
    set ("" with no versions: every version of the wheelhouse)."""

    package: str
    versions: tuple[str, ...] = ()
    specifier: str = ""

    def __str__(self) -> str:
        return f"{self.package}=={','.join(self.versions)}" if self.versions else f"{self.package}{self.specifier}"


def _version(text: str, package: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ToolchainError(f"--toolchain {package}: {text!r} is not a version (PEP 440)") from None


def parse(text: str) -> Ask:
    """The Ask of `text` (`PACKAGE==V1,V2,...`, `PACKAGE<specifiers>`, or `PACKAGE`). Raises
    ToolchainError for a name or version that does not parse, a repeated version, or fewer than
    two versions listed."""
    text = text.strip()
    match = re.match(r"^([A-Za-z0-9._-]+)\s*(.*)$", text)
    if not match or not NAME.match(match.group(1)):
        raise ToolchainError(f"--toolchain {text!r}: write PACKAGE==V1,V2,... or PACKAGE>=V1,<=V2 or PACKAGE")
    package, rest = match.group(1), match.group(2).strip()
    if not rest:
        return Ask(package)
    if rest.startswith("==") and not rest.startswith("==="):
        versions = tuple(v.strip() for v in rest[2:].split(","))
        if any(not v for v in versions):
            raise ToolchainError(f"--toolchain {text!r}: an empty version in the list")
        for v in versions:
            _version(v, package)
        if len({_version(v, package) for v in versions}) != len(versions):
            raise ToolchainError(f"--toolchain {text!r}: a version is listed twice")
        if len(versions) < 2:
            raise ToolchainError(f"--toolchain {text!r}: a toolchain bisect needs two versions or more "
                                 "(PACKAGE==OLD,NEW), or a range with --wheelhouse")
        return Ask(package, versions)
    try:
        SpecifierSet(rest)
    except InvalidSpecifier:
        raise ToolchainError(f"--toolchain {text!r}: {rest!r} is neither ==V1,V2,... nor a version range "
                             "such as >=1.0,<=2.0") from None
    return Ask(package, specifier=rest)


def ordered(versions: Iterable[str]) -> list[str]:
    """`versions` in PEP 440 order (1.9 < 1.10 < 2.0rc1 < 2.0), each once."""
    seen: dict[Version, str] = {}
    for v in versions:
        seen.setdefault(Version(v), v)
    return [seen[k] for k in sorted(seen)]


def wheel_versions(package: str, filenames: Iterable[str]) -> dict[str, str]:
    """The wheels of `package` among `filenames`: version -> file name (the first of each
    version in name order; names that are not wheels, or wheels of other packages, are left out)."""
    wanted, found = canonicalize_name(package), {}
    for name in sorted(filenames):
        if not name.endswith(".whl"):
            continue
        try:
            dist, version, _build, _tags = parse_wheel_filename(name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if dist == wanted:
            found.setdefault(str(version), name)
    return found


def select(ask: Ask, available: Sequence[str], where: str = "the wheelhouse") -> list[str]:
    """The versions to bisect, in order: the listed ones as given (each must be `available`,
    compared as versions: 2.0 names 2.0.0's wheel), else the available ones in the specifier set,
    in version order. Raises ToolchainError for a listed version that is missing, or fewer than
    two (or over MAX_VERSIONS) versions."""
    by_version = {Version(v): v for v in available}
    if ask.versions:
        missing = [v for v in ask.versions if Version(v) not in by_version]
        if missing:
            have = ", ".join(ordered(available)) or "none"
            raise ToolchainError(f"{where} has no wheel of {ask.package} {', '.join(missing)} (it has: {have})")
        chosen = [by_version[Version(v)] for v in ask.versions]
    else:
        specifier = SpecifierSet(ask.specifier, prereleases=True)
        chosen = [v for v in ordered(available) if Version(v) in specifier]
    if len(chosen) < 2:
        have = ", ".join(chosen) or "none"
        raise ToolchainError(f"{where} has {len(chosen)} version(s) of {ask} ({have}): a toolchain bisect needs two "
                             "or more")
    if len(chosen) > MAX_VERSIONS:
        raise ToolchainError(f"{ask} names {len(chosen)} versions: at most {MAX_VERSIONS}")
    for v in chosen:
        if len(label(ask.package, v)) > MAX_LABEL:
            raise ToolchainError(f"{ask.package}=={v} is over {MAX_LABEL} characters")
    return chosen


def same_package(name: str, package: str) -> bool:
    """Whether `name` is `package` as PEP 503 normalises names ("Tiny_Op" is "tinyop")."""
    return canonicalize_name(name) == canonicalize_name(package)


def label(package: str, version: str) -> str:
    """A version as a revision of the job: "tinyop==2.0"."""
    return f"{package}=={version}"


def version_of(revision: str) -> str:
    """The version of a revision label."""
    return revision.split("==", 1)[1]
