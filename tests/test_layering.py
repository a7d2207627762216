"""Which layer may import which (docs/architecture.md, "Layers and the import rule"), checked on
the imports as the code writes them (tests/import_graph.py reads them with `ast`): every import,
at module level or inside a function, counts, so the layering cannot silently decay again.

From the top: the CLI (cli/, formerly service/cli/) may import everything; dashboards/ and
workers/ import the service; the service imports neither them nor the CLI; the queue modules
and git sit under the service; the planner (service/bisect/) and the harness (kernels/) import
nothing of the rest."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.import_graph import Import, product_imports, service_cycles

CLI = ("perfbisect.cli", "perfbisect.service.cli")
SERVICE = ("perfbisect.service",)
WORKERS = ("perfbisect.workers",)
DASHBOARDS = ("perfbisect.dashboards",)
QUEUE = ("perfbisect.queue", "perfbisect.dispatch")
GIT = ("perfbisect.gitrepo",)
PLANNER = ("perfbisect.service.bisect",)
HARNESS = ("perfbisect.kernels",)
MIGRATIONS = ("perfbisect.migrations",)
# The app factory mounts the dashboard and renders errors as its pages: the one place the service
# reaches up, at call time.
APP_FACTORY = ("perfbisect.service.api", "perfbisect.service.api.errors")
# Optional libraries the harness imports inside a function, where the hardware or the suite has
# them: NVML, AMD SMI, the ROCm suites' reference kernels, and the test-only result validator.
HARNESS_OPTIONAL = {"pynvml", "amdsmi", "aiter", "jsonschema"}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _in(module: str, layer: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in layer)


def _top(module: str) -> str:
    return module.split(".")[0]


def _forbidden(imp: Import) -> str | None:
    """Why this import breaks the layering, or None."""
    s, t = imp.source, imp.target
    if _in(s, HARNESS):
        if _top(t) == "perfbisect" and t != "perfbisect" and not _in(t, HARNESS):
            return "kernels/ imports nothing of the product but itself"
        allowed = {"torch", "triton", "numpy", "perfbisect"} | (set() if imp.module_level else HARNESS_OPTIONAL)
        if _top(t) not in STDLIB | allowed:
            return "kernels/ imports only torch, triton, numpy and the standard library"
        return None
    if _in(s, PLANNER):
        if (_top(t) == "perfbisect" and not _in(t, PLANNER)) or _top(t) not in STDLIB | {"numpy", "scipy", "perfbisect"}:
            return "service/bisect/ is pure: the standard library, numpy and scipy only"
        return None
    if _in(s, MIGRATIONS):
        env_needs = ("perfbisect.service.settings", "perfbisect.service.tables")
        ok = _top(t) != "perfbisect" or (s == "perfbisect.migrations.env" and t in env_needs)
        return None if ok else "a migration carries what it needs (env.py: the settings and the tables)"
    if _in(s, CLI):
        return None
    if _in(t, CLI):
        return "nothing below the CLI imports it"
    if _in(s, QUEUE + GIT):
        if _in(t, WORKERS + DASHBOARDS) or (_in(t, SERVICE) and t != "perfbisect.service.settings"):
            return "the queue and git modules import the settings and nothing above"
        return None
    if _in(s, SERVICE):
        if _in(t, WORKERS):
            return "the service never imports the workers (it sends tasks by name, perfbisect.queue)"
        if _in(t, DASHBOARDS) and not (s in APP_FACTORY and not imp.module_level):
            return "the service imports no dashboard (only the app factory mounts it)"
        return None
    if _in(s, DASHBOARDS) and _in(t, WORKERS):
        return "dashboards/ read the service, never the workers"
    if _in(s, WORKERS) and _in(t, DASHBOARDS):
        return "workers/ import no dashboard"
    return None


def violations(imports: list[Import]) -> list[str]:
    return [f"{imp.path.name}:{imp.line} {imp.source} -> {imp.target}: {why}"
            for imp in imports if (why := _forbidden(imp))]


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return product_imports()


def test_every_import_follows_the_layering(imports: list[Import]) -> None:
    assert violations(imports) == []


def test_the_graph_holds_the_imports_the_layers_are_built_on(imports: list[Import]) -> None:
    edges = {(i.source, i.target) for i in imports}
    assert ("perfbisect.workers.tasks", "perfbisect.service.trials.service") in edges  # from a package import a module
    assert ("perfbisect.service.jobs.advance", "perfbisect.service.bisect") in edges
    assert any(s.startswith("perfbisect.dashboards.") and _in(t, SERVICE) for s, t in edges)
    assert any(_in(s, HARNESS) and t == "torch" for s, t in edges)


def _imp(source: str, target: str, module_level: bool = True) -> Import:
    return Import(source, target, Path("x.py"), 1, module_level)


@pytest.mark.parametrize(("source", "target"), [
    ("perfbisect.kernels.harness.runner", "perfbisect.service.settings"),
    ("perfbisect.kernels.harness.nvidia", "pynvml"),  # at module level
    ("perfbisect.kernels.suites.gemm", "scipy"),
    ("perfbisect.service.bisect.planner", "sqlalchemy"),
    ("perfbisect.service.bisect.planner", "perfbisect.service.models"),
    ("perfbisect.service.bisect.simulate", "torch"),
    ("perfbisect.service.jobs.endpoints", "perfbisect.workers.tasks"),
    ("perfbisect.service.api.metrics", "perfbisect.workers.heartbeat"),
    ("perfbisect.service.jobs.views", "perfbisect.dashboards.history"),
    ("perfbisect.service.api", "perfbisect.dashboards.routes"),  # the factory, but at module level
    ("perfbisect.workers.tasks", "perfbisect.cli.common"),
    ("perfbisect.workers.tasks", "perfbisect.service.cli.main"),
    ("perfbisect.dashboards.views", "perfbisect.cli.main"),
    ("perfbisect.dashboards.views", "perfbisect.workers.tasks"),
    ("perfbisect.migrations.versions.0002_scale", "perfbisect.dashboards.history"),
    ("perfbisect.migrations.env", "perfbisect.workers.tasks"),
    ("perfbisect.queue", "perfbisect.service.models"),
])
def test_a_forbidden_import_is_named(source: str, target: str) -> None:
    assert len(violations([_imp(source, target)])) == 1


@pytest.mark.parametrize(("source", "target", "module_level"), [
    ("perfbisect.kernels.harness.nvidia", "pynvml", False),
    ("perfbisect.kernels.harness.runner", "perfbisect", True),
    ("perfbisect.service.bisect.planner", "scipy", True),
    ("perfbisect.service.api", "perfbisect.dashboards.routes", False),
    ("perfbisect.cli.main", "perfbisect.workers.tasks", True),
    ("perfbisect.workers.tasks", "perfbisect.service.models", True),
    ("perfbisect.dashboards.views", "perfbisect.service.jobs.schemas", True),
    ("perfbisect.service.jobs.endpoints", "perfbisect.queue", True),
])
def test_an_allowed_import_passes(source: str, target: str, module_level: bool) -> None:
    assert violations([_imp(source, target, module_level)]) == []


# The service/ packages that still import each other at module level (bench/import_cycles.py):
# a new pair fails here; one that goes may leave this list.
KNOWN_CYCLES = {("api", "notifications"), ("attribution", "jobs"), ("jobs", "reports"), ("jobs", "trials"),
                ("jobs", "webhooks"), ("tracking", "webhooks")}


def test_no_new_import_cycle_between_service_packages(imports: list[Import]) -> None:
    pairs, _ = service_cycles(imports)
    assert set(pairs) <= KNOWN_CYCLES, set(pairs) - KNOWN_CYCLES


# Containment in one place (kernels/harness/contain/): the worker's sandbox and the harness's
# launcher start, wait for and kill untrusted processes only through it. A module of workers/ or
# of the rest of the harness that started a process itself, or any module that built a bwrap
# command line, would be a second way around the slot's uid, limits and namespaces.
CONTAIN = "perfbisect.kernels.harness.contain"
STARTERS = ("perfbisect.workers", "perfbisect.kernels.harness")
PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "pexpect"}
PROCESS_CALLS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp",
                 "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl", "spawnle"}
BWRAP_FLAGS = ("--unshare-", "--ro-bind", "--dev-bind", "--cap-add", "--die-with-parent", "--as-pid-1")


def process_starts(module: str, tree: ast.AST, imports: list[Import]) -> list[str]:
    """Where `module` (its `tree` and its `imports`) starts a process or builds bwrap's command
    line outside the containment package."""
    if _in(module, (CONTAIN,)):
        return []
    found = []
    if _in(module, STARTERS):
        found += [f"imports {i.target}" for i in imports if i.source == module and _top(i.target) in PROCESS_MODULES]
        found += [f"calls os.{node.func.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == "os"
                  and node.func.attr in PROCESS_CALLS]
    found += [f"builds a bwrap command line ({node.value!r})" for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str)
              and (node.value == "bwrap" or node.value.startswith(BWRAP_FLAGS))]
    return found


def test_untrusted_processes_start_only_through_the_containment_package(imports: list[Import]) -> None:
    from tests.import_graph import module_name, product_files

    offences = {}
    for path in product_files():
        module = module_name(path)
        if found := process_starts(module, ast.parse(path.read_text()), imports):
            offences[module] = found
    assert offences == {}


@pytest.mark.parametrize(("module", "code", "imported"), [
    ("perfbisect.workers.sandbox", "import subprocess", "subprocess"),
    ("perfbisect.workers.build", "from multiprocessing import Process", "multiprocessing"),
    ("perfbisect.kernels.harness.launch", "pid = os.fork()", None),
    ("perfbisect.workers.tasks", "os.execv('/bin/sh', ['sh'])", None),
    ("perfbisect.service.jobs.service", "ARGV = ['bwrap', '--unshare-net']", None),
])
def test_a_process_started_outside_the_containment_package_is_named(module, code, imported) -> None:
    imps = [_imp(module, imported)] if imported else []
    assert process_starts(module, ast.parse(code), imps) != []
    assert process_starts(CONTAIN + ".process", ast.parse(code), imps) == []
