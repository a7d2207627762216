"""Where a repository pins a dependency, read from a file's text: PURE (the standard library only,
no git, no database), so every rule is pinned by literal tests (tests/test_pins.py).

A pin is a commit, tag or version of the dependency, found by one of:
- `submodule`: the gitlink of a submodule path (`git ls-tree <sha> -- <path>` gives the line);
- `json`: a key of a JSON file, dotted for nesting (`llvm.commit` in thirdparty/llvm-build-info.json);
- `requirements`: a `name==version` line of a requirements or constraints file (names compared as
  PEP 503 normalises them, comments and markers ignored);
- `assign`: a `NAME = "value"` line (`REV = "..."` in a build script), either quote.

Every reader raises PinError, whose message names the file and what was looked for, when the
pin is not there: a declaration that matches nothing is refused at registration (HTTP 422).
"""

from __future__ import annotations

import json
import re
from typing import Literal

PinKind = Literal["submodule", "json", "requirements", "assign"]
PIN_KINDS: tuple[str, ...] = ("submodule", "json", "requirements", "assign")
GITLINK_MODE = "160000"


class PinError(ValueError):
    """The declared pin is not in the file (or the file is not what its kind reads)."""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def json_pin(text: str, key: str, file: str = "") -> str:
    """The string (or number) at dotted `key` of JSON `text`."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise PinError(f"{file or 'the pin file'} is not JSON: {exc}") from None
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise PinError(f"{file or 'the pin file'} has no key {key!r}")
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or str(value).strip() == "":
        raise PinError(f"{file or 'the pin file'}: {key!r} is not a commit, tag or version ({value!r})")
    return str(value).strip()


def requirement_pin(text: str, name: str, file: str = "") -> str:
    """The version of the `name==version` line (`name[extra]==version ; marker  # comment` too)."""
    wanted = _normalized(name)
    for line in text.splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        found = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*(\S+)", line)
        if found and _normalized(found.group(1)) == wanted:
            return found.group(2)
    raise PinError(f"{file or 'the pin file'} has no line {name}==<version>")


def assign_pin(text: str, name: str, file: str = "") -> str:
    """The quoted value of the first `NAME = "value"` line (`NAME := 'value'`, `set NAME "value"` no)."""
    pattern = re.compile(rf"^\s*{re.escape(name)}\s*[:]?=\s*([\"'])([^\"'\n]+)\1\s*(?:#.*)?$", re.MULTILINE)
    found = pattern.search(text)
    if found is None:
        raise PinError(f"{file or 'the pin file'} has no line {name} = \"<commit>\"")
    return found.group(2).strip()


def gitlink(ls_tree: str, path: str) -> str:
    """The commit of submodule `path` from `git ls-tree <sha> -- <path>`'s output."""
    for line in ls_tree.splitlines():
        meta, _, name = line.partition("\t")
        parts = meta.split()
        if name.strip("/") == path.strip("/") and len(parts) == 3:
            if parts[0] != GITLINK_MODE or parts[1] != "commit":
                raise PinError(f"{path} is a {parts[1]}, not a submodule (gitlink)")
            return parts[2]
    raise PinError(f"no submodule at {path}")


def extract(kind: str, key: str | None, text: str, file: str = "") -> str:
    """The pin of a file pin (`json`, `requirements`, `assign`) from the file's `text`."""
    readers = {"json": json_pin, "requirements": requirement_pin, "assign": assign_pin}
    if kind not in readers:
        raise PinError(f"a {kind} pin is not read from a file's text")
    if not key:
        raise PinError(f"a {kind} pin needs a key (the JSON key, the package name or the variable)")
    return readers[kind](text, key, file)


def gitmodules(text: str) -> dict[str, str]:
    """path -> url of every `[submodule "..."]` section of a .gitmodules file."""
    found: dict[str, str] = {}
    section: dict[str, str] = {}
    for raw in text.splitlines() + ["[end]"]:
        line = raw.strip()
        if line.startswith("["):
            if "path" in section and "url" in section:
                found[section["path"].strip("/")] = section["url"]
            section = {}
        elif "=" in line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            section[name.strip().lower()] = value.strip()
    return found


def changed_gitlinks(diff_raw: str) -> dict[str, tuple[str, str]]:
    """path -> (old, new) commit of every submodule whose gitlink a commit moved, from `git diff
    --raw <parent> <sha>` (modes 160000 on both sides; an added or removed submodule is not a bump)."""
    moved: dict[str, tuple[str, str]] = {}
    for line in diff_raw.splitlines():
        meta, _, path = line.partition("\t")
        parts = meta.lstrip(":").split()
        if len(parts) >= 4 and parts[0] == GITLINK_MODE and parts[1] == GITLINK_MODE and parts[2] != parts[3]:
            moved[path.strip()] = (parts[2], parts[3])
    return moved


TAG_PATTERN = re.compile(r"^[A-Za-z0-9._/+-]*\{version\}[A-Za-z0-9._/+-]*$")


def tag_names(version: str, pattern: str | None = None) -> list[str]:
    """The tags a version of the dependency may go by, in the order tried: the declared `pattern`
    with `{version}` filled in ("release-{version}" -> "release-2.0"), else the version itself and
    its `v` tag ("2.0", "v2.0")."""
    if pattern:
        return [pattern.replace("{version}", version)]
    return [version, f"v{version}"]
