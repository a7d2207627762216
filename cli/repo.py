"""`perfbisect repo add|list|show|add-set`: registered repositories and their benchmark sets, on
this machine's database (the CLI acts as its admin) or through --api with PERFBISECT_TOKEN."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from perfbisect.cli.common import (ApiOpt, CLIError, EnvOpt, JsonOpt, ShapeOpt, SuiteFileOpt, SuiteOpt, TargetOpt,
                                   benchmarks_of, parse_env, prepare_database, user_errors, validated)

repo_app = typer.Typer(help="Registered repositories and their benchmark sets.", no_args_is_help=True, rich_markup_mode=None)


def _local(work):
    """Run `work(session)` on this machine's database as its admin; domain errors are CLIErrors."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.errors import PerfbisectError

    prepare_database()
    try:
        with session_scope() as session:
            return work(session)
    except PerfbisectError as exc:
        raise CLIError(exc.message) from exc


def _remote(method: str, api: str, path: str, body: Any = None) -> Any:
    from perfbisect.cli.follow import call  # the job machinery: not at start-up

    return call(method, f"{api.rstrip('/')}{path}", json=body, timeout=120).json()


def _print(data: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    for repo in data if isinstance(data, list) else [data]:
        print(f"{repo['name']:<24} {repo['url']}")
        print(f"{'':<24} build: {repo.get('build_command') or '-'}; import root: {repo['import_root']}; "
              f"env: {', '.join(f'{k}={v}' for k, v in repo.get('env', {}).items()) or '-'}")
        for dep in repo.get("dependencies") or []:
            pin = dep["pin"]
            print(f"{'':<24} dependency {dep['name']} ({dep['repository']}): {pin['kind']} {pin['file']}"
                  f"{' ' + pin['key'] if pin.get('key') else ''}{'; tags: ' + pin['tag'] if pin.get('tag') else ''}"
                  f"{'; recipe: ' + dep['recipe'] if dep.get('recipe') else ''}")
        if repo.get("build_inputs"):
            print(f"{'':<24} build inputs (a revision that changes none of them reuses a cached build): "
                  f"{', '.join(repo['build_inputs'])}")
        for bench_set in repo.get("benchmark_sets", []):
            print(f"{'':<24} benchmark set {bench_set['name']}: {len(bench_set['cases'])} case(s)")
            for case in bench_set["cases"]:
                print(f"{'':<28}{case['name']}  ->  {case['target']}")
            for source in bench_set.get("sources", []):
                print(f"{'':<28}{source['suite']}: sha256 {source['sha256']} ({source['bytes']} bytes)")


@repo_app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="a local path or a git URL (https, ssh, git)")],
    name: Annotated[Optional[str], typer.Option(help="default: the path's last component")] = None,
    build: Annotated[Optional[str], typer.Option(
        help="build command ({build_dir}: a per-revision install directory, {python}: the worker's interpreter)")] = None,
    build_input: Annotated[Optional[list[str]], typer.Option(
        help="repeatable: a path or glob (relative to the repository) the build's output depends on; a revision "
             "whose declared inputs are unchanged reuses a cached build. Declare every file the build copies or "
             "compiles into {build_dir} (a file left out is served stale); '.' is the whole tree")] = None,
    import_root: Annotated[str, typer.Option(help="directory on sys.path, relative to the repository")] = ".",
    env: EnvOpt = None,
    default_branch: str = "main",
    dependency: Annotated[Optional[list[str]], typer.Option(
        help="repeatable: a dependency it pins, NAME[@REPO]=KIND:FILE[:KEY] (KIND: submodule, json, "
             "requirements, assign; REPO: the registered repository of its history, default NAME), e.g. "
             "minicc=assign:minicc.pin:REV, or the JSON of one (with path and recipe). Submodules of registered "
             "repositories need none. A culprit that moves a pin is bisected inside the dependency")] = None,
    api: ApiOpt = None, as_json: JsonOpt = False,
) -> None:
    """Register a repository (its build command and env run on the workers)."""
    from perfbisect.service.repos.schemas import RepositoryCreate, RepositoryRead

    with user_errors():
        path = Path(url).expanduser()
        if path.exists() and not api:  # a local checkout, registered (or updated) as `bisect --repo PATH` does
            from perfbisect.cli.runs import register_path  # the job machinery: not at start-up

            prepare_database()
            name = register_path(path, build, name, import_root, parse_env(env), build_inputs=build_input,
                                 dependencies=parse_dependencies(dependency))
            shown = _local(lambda session: _read(session, name))
        else:
            data = validated(RepositoryCreate, name=name or Path(url).stem, url=str(path.resolve()) if path.exists() else url,
                             build_command=build, build_inputs=build_input or [], import_root=import_root,
                             env=parse_env(env) or {},
                             default_branch=default_branch, dependencies=parse_dependencies(dependency) or [])
            if api:
                shown = _remote("POST", api, "/api/repositories", data.model_dump(mode="json", exclude_none=True))
            else:
                from perfbisect.service.repos import service

                shown = _local(lambda session: RepositoryRead.of(service.create(session, data), reveal=True).model_dump())
    _print(shown, as_json)


def parse_dependencies(values: list[str] | None) -> list[dict[str, Any]] | None:
    """`--dependency` values as Dependency fields (validated by RepositoryCreate); None when none
    was given. Raises CLIError for a value of neither form."""
    if not values:
        return None
    out = []
    for value in values:
        if value.lstrip().startswith("{"):
            try:
                given = json.loads(value)
            except ValueError as exc:
                raise CLIError(f"--dependency {value!r} is not JSON: {exc}") from None
            if isinstance(given, dict) and "name" in given:  # its history's repository: NAME, as in the short form
                given.setdefault("repository", given["name"])
            out.append(given)
            continue
        head, sep, where = value.partition("=")
        parts = where.split(":", 2)
        if not sep or len(parts) < 2:
            raise CLIError(f"--dependency {value!r}: write NAME=KIND:FILE:KEY (or NAME@REPO=..., "
                           "a submodule NAME=submodule:PATH), e.g. minicc=assign:minicc.pin:REV")
        dep_name, _, repo = head.partition("@")
        pin = {"kind": parts[0], "file": parts[1], **({"key": parts[2]} if len(parts) == 3 else {})}
        out.append({"name": dep_name, "repository": repo or dep_name, "pin": pin})
    return out


def _read(session, name: str) -> dict[str, Any]:
    from perfbisect.service.repos import service
    from perfbisect.service.repos.schemas import RepositoryRead
    from perfbisect.service.suites import service as suites

    repo = service.get(session, name)
    return {**RepositoryRead.of(repo, reveal=True).model_dump(),
            "benchmark_sets": [s.model_dump() for s in suites.sets_of(session, repo)]}


@repo_app.command("list")
def list_repositories(api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Every registered repository."""
    with user_errors():
        if api:
            shown = _remote("GET", api, "/api/repositories")
        else:
            from perfbisect.service.repos import repository
            from perfbisect.service.repos.schemas import RepositoryRead

            shown = _local(lambda session: [RepositoryRead.of(r, reveal=True).model_dump()
                                            for r in repository.list_all(session)])
    _print(shown, as_json)


@repo_app.command("show")
def show(name: str, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """One repository with its benchmark sets."""
    with user_errors():
        if api:
            shown = {**_remote("GET", api, f"/api/repositories/{name}"),
                     "benchmark_sets": _remote("GET", api, f"/api/repositories/{name}/benchmark-sets")}
        else:
            shown = _local(lambda session: _read(session, name))
    _print(shown, as_json)


@repo_app.command("add-set")
def add_set(
    name: Annotated[str, typer.Argument(help="the repository")],
    set_name: Annotated[str, typer.Argument(help="the benchmark set (registering it again replaces it)")],
    suite: SuiteOpt = None, suite_file: SuiteFileOpt = None, target: TargetOpt = None, shape: ShapeOpt = None,
    api: ApiOpt = None, as_json: JsonOpt = False,
) -> None:
    """Register a named benchmark set: one suite (built in, file:path in the repository, or a local
    --suite-file) with its target and shape presets; jobs use it with --benchmark-set."""
    from perfbisect.service.suites.schemas import BenchmarkSetCreate

    with user_errors():
        data = validated(BenchmarkSetCreate, name=set_name,
                         benchmarks=benchmarks_of(suite, suite_file, target, shape) or [])
        if api:
            created = _remote("POST", api, f"/api/repositories/{name}/benchmark-sets", data.model_dump(exclude_none=True))
        else:
            def register(session):
                from perfbisect.service.repos import service
                from perfbisect.service.suites import service as suites

                repo = service.get(session, name)
                return suites.set_read(session, repo, suites.register_set(session, repo, data)).model_dump()
            created = _local(register)
    if as_json:
        print(json.dumps(created, indent=2))
    else:
        _print({"name": name, "url": "", "import_root": "", "benchmark_sets": [created]}, False)
