from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from perfbisect.service.bounds import text
from perfbisect.service.models import Repository
from perfbisect.service.repos.pins import TAG_PATTERN
from perfbisect.service.repos.urls import public_url

EnvName = text(100, min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
HIDDEN = "***"
MAX_BUILD_INPUTS = 64
BuildInput = text(200, min_length=1, pattern=r"^[^\x00-\x1f\\]*$")
BUILD_INPUTS_HELP = (
    "paths or globs, relative to the repository root, that the build's output depends on (\"setup.py\", "
    "\"csrc/\", \"src/*/ops\"; \".\" is the whole tree). A revision whose declared files, build command, env "
    "and toolchain equal those of one already built on the worker reuses that build instead of running the "
    "command. Declare EVERY file the command copies or compiles into {build_dir}: a file left out is served "
    "stale once it changes (a build whose output holds a copy of an undeclared file is not cached). "
    "Empty: every trial builds.")


def checked_build_input(value: str) -> str:
    """A declared build input, normalised ("./csrc" -> "csrc"); raises ValueError naming the rule."""
    if value.startswith("/"):
        raise ValueError(f"build input {value!r} must be relative to the repository root (no leading '/')")
    if ".." in value.split("/"):
        raise ValueError(f"build input {value!r} must stay inside the repository (no '..')")
    if value != value.strip():
        raise ValueError(f"build input {value!r} must not start or end with white space")
    trimmed = value
    while trimmed.startswith("./"):
        trimmed = trimmed[2:]
    return trimmed or "."


SET_NAME = text(100, min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
CaseSelector = text(300, min_length=1)


class PrPolicy(BaseModel):
    """What the pull-request bot measures on a PR and how its merge gate reads a compare that did
    not decide every case."""

    model_config = ConfigDict(extra="forbid")

    inconclusive: Literal["neutral", "failure"] = Field(
        default="neutral", description="the check's conclusion when a case could not be decided (too noisy, trial cap)")
    failed: Literal["neutral", "failure"] = Field(
        default="neutral", description="the check's conclusion when a case could not be measured or the job failed")
    shapes: Literal["warn", "failure"] = Field(
        default="warn", description="a case whose calls got noisier or gained a mode (issue 46): named in the check "
                                    "(warn), or a failed check (failure)")
    benchmark_set: SET_NAME | None = Field(
        default=None, description="the benchmark set a PR is compared on (default: the cases of the tracked branch "
                                  "the PR targets, else of every benchmark set and tracked branch of the repository)")
    device_class: text(40, pattern=r"^[a-z0-9_-]{1,40}$") | None = Field(
        default=None, description="default: the tracked branch's")
    min_effect: float | None = Field(default=None, gt=0, lt=1, description="default: the tracked branch's min_magnitude")
    kernel_paths: Annotated[dict[BuildInput, Annotated[list[CaseSelector], Field(min_length=1, max_length=64)]],
                            Field(max_length=64)] = Field(
        default_factory=dict, examples=[{"kernels/gemm/*": ["gemm"], "kernels/norm.py": ["rmsnorm"]}],
        description="a PR touching a file matched by a glob (or under a directory) is also compared on the "
                    "repository's known cases of those suites (or case names)")


DEPS_DIR = ".perfbisect-deps"  # where a file-pinned dependency's tree goes by default
MAX_DEPENDENCIES = 16


class PinLocation(BaseModel):
    """Where the repository pins a dependency (service/repos/pins.py reads it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["submodule", "json", "requirements", "assign"] = Field(
        description="submodule: the gitlink at `file` (a submodule path); json: the dotted `key` of JSON file "
                    "`file`; requirements: the `key==version` line; assign: the `key = \"...\"` line")
    file: BuildInput = Field(examples=["thirdparty/llvm-build-info.json", "third_party/minicc"])
    key: text(200, min_length=1) | None = Field(default=None, examples=["llvm.commit", "triton", "REV"])
    tag: text(200) | None = Field(
        default=None, examples=["release-{version}"],
        description="the tag a version pin (and a toolchain bisect's version) names in the dependency's repository, "
                    "{version} filled in (default: the version itself, then v<version>)")

    @field_validator("tag")
    @classmethod
    def _tag_pattern(cls, value: str | None) -> str | None:
        if value is not None and (not TAG_PATTERN.match(value) or ".." in value):
            raise ValueError(f"tag {value!r} must hold {{version}} once, with letters, digits and ._/+- around it "
                             "(\"v{version}\", \"release-{version}\")")
        return value

    @field_validator("file")
    @classmethod
    def _inside(cls, value: str) -> str:
        return checked_build_input(value)

    @model_validator(mode="after")
    def _key_for_a_file(self) -> PinLocation:
        if self.kind != "submodule" and not self.key:
            raise ValueError(f"a {self.kind} pin needs a key (the JSON key, the package name or the variable)")
        return self


class Dependency(BaseModel):
    """A dependency the repository pins: a bump of its pin is bisected inside the dependency's own
    history (the registered repository `repository`). Every trial places the dependency's tree,
    at the pin the revision names, at `path` in the revision's worktree, then runs `recipe`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SET_NAME = Field(examples=["minicc"])
    repository: SET_NAME = Field(description="the registered repository that holds its history")
    pin: PinLocation
    path: BuildInput | None = Field(default=None, description=f"where its tree is placed in the worktree "
                                    f"(default: a submodule's own path, else {DEPS_DIR}/<name>)")
    recipe: text(10_000) | None = Field(
        default=None, examples=["{python} -m pip install --no-deps --target {build_dir} {dep_dir}"],
        description="run in the trial's sandbox after placing it, before the build: {dep_dir} (its tree), "
                    "{build_dir} and {python} are filled in")

    @field_validator("path")
    @classmethod
    def _path_inside(cls, value: str | None) -> str | None:
        return None if value is None else checked_build_input(value)

    def placed_at(self) -> str:
        """The path of its tree inside a revision's worktree."""
        return self.path or (self.pin.file if self.pin.kind == "submodule" else f"{DEPS_DIR}/{self.name}")


def _unique_dependencies(value: list[Dependency]) -> list[Dependency]:
    names = [d.name for d in value]
    if len(set(names)) != len(names):
        raise ValueError("dependency names must be unique")
    places = [d.placed_at() for d in value]
    if len(set(places)) != len(places) or "." in places:
        raise ValueError("every dependency needs its own path inside the worktree")
    return value


class RepositoryCreate(BaseModel):
    """Registering is admin-only: the build command and env run on the workers."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$", examples=["minikern"])
    url: text(2000, min_length=1) = Field(description="git URL (https, ssh, git) or an absolute local path "
                                          "under PERFBISECT_LOCAL_REPO_ROOTS")
    build_command: text(10_000) | None = Field(default=None, examples=["pip install -e . --no-deps"])
    build_inputs: Annotated[list[BuildInput], Field(max_length=MAX_BUILD_INPUTS)] = Field(
        default_factory=list, description=BUILD_INPUTS_HELP, examples=[["setup.py", "pyproject.toml", "csrc/", "src/"]])
    import_root: str = Field(default=".", max_length=200, pattern=r"^[A-Za-z0-9_./-]+$", examples=[".", "src"])
    env: Annotated[dict[EnvName, text(4000)], Field(max_length=64)] = Field(
        default_factory=dict, examples=[{"FLYDSL_RUNTIME_ENABLE_CACHE": "0"}])
    default_branch: str = Field(default="main", max_length=200, pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$")
    pr_policy: PrPolicy = Field(default_factory=PrPolicy)
    dependencies: Annotated[list[Dependency], Field(max_length=MAX_DEPENDENCIES)] = Field(
        default_factory=list, description="the dependencies it pins; its submodules are added without a "
                                          "declaration when their URL is a registered repository's")

    @field_validator("dependencies")
    @classmethod
    def _dependencies_apart(cls, value: list[Dependency]) -> list[Dependency]:
        return _unique_dependencies(value)

    @field_validator("import_root")
    @classmethod
    def _inside_the_repository(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/"):
            raise ValueError("import_root is a relative path inside the repository (no '/' prefix, no '..')")
        return value

    @field_validator("build_inputs")
    @classmethod
    def _build_inputs_inside(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(checked_build_input(v) for v in value))

    @model_validator(mode="after")
    def _inputs_need_a_command(self) -> RepositoryCreate:
        if self.build_inputs and not self.build_command:
            raise ValueError("build_inputs declare what the build command reads: give a build_command too")
        return self


class RepositoryUpdate(BaseModel):
    """Admin only: what may change on a registered repository."""

    model_config = ConfigDict(extra="forbid")

    pr_policy: PrPolicy


class RepositoryRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    url: str
    build_command: str | None
    build_inputs: list[str] = Field(default_factory=list, description=BUILD_INPUTS_HELP)
    import_root: str
    env: dict[str, str] = Field(description=f"values are {HIDDEN!r} unless the caller is an admin")
    default_branch: str
    pr_policy: PrPolicy = Field(default_factory=PrPolicy)
    dependencies: list[Dependency] = Field(default_factory=list)
    created_at: datetime

    @classmethod
    def of(cls, repo: Repository, *, reveal: bool) -> RepositoryRead:
        """The row as a caller may see it: env values and URL credentials for admins only."""
        read = cls.model_validate(repo)
        if reveal:
            return read
        return read.model_copy(update={"url": public_url(read.url), "env": {k: HIDDEN for k in read.env}})
