"""The CLI is the top layer: its modules import each other without a loop, the shared module
(cli/common.py) imports nothing else of the CLI, no command module imports the entry point back,
and service/, workers/ and kernels/ never import the CLI. Read from the source with `ast`, so a
new import that breaks the layering fails here, not at some later start-up."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = "perfbisect.cli"


def _imports(nodes: list[ast.stmt]) -> Iterator[str]:
    """The modules (and `from X import name` candidates X.name) the statements import."""
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """The statements that run when the module is imported: its body, and the bodies of
    top-level if/try blocks (an `if TYPE_CHECKING:` block included), never a function's."""
    found, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, (ast.If, ast.Try)):
            stack += node.body + node.orelse + getattr(node, "finalbody", []) + [
                s for h in getattr(node, "handlers", []) for s in h.body]
    return found


def _cli_modules() -> dict[str, Path]:
    return {f"{CLI}.{path.stem}": path for path in sorted((ROOT / "cli").glob("*.py")) if path.stem != "__init__"}


def _graph(module_level_only: bool) -> dict[str, set[str]]:
    modules = _cli_modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        nodes = _module_level(tree) if module_level_only else list(ast.walk(tree))
        graph[name] = {m for m in _imports(nodes) if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop of `graph` (a path that comes back to its start), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_the_cycle_finder_finds_a_loop() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_cli_modules_import_each_other_without_a_loop() -> None:
    graph = _graph(module_level_only=True)
    assert len(graph) >= 10 and f"{CLI}.common" in graph
    assert _cycle(graph) is None


def test_the_shared_module_imports_nothing_of_the_cli_and_nothing_imports_the_entry_point() -> None:
    graph = _graph(module_level_only=False)  # function-level imports too: a lazy import is still a loop
    assert graph[f"{CLI}.common"] == set()
    assert [name for name, imported in graph.items() if f"{CLI}.main" in imported] == []
    assert _cycle(graph) is None


def test_service_workers_and_kernels_never_import_the_cli() -> None:
    offenders = []
    for top in ("service", "workers", "kernels", "perfbisect", "migrations", "dashboards"):
        for path in sorted((ROOT / top).rglob("*.py")):
            imported = set(_imports(list(ast.walk(ast.parse(path.read_text())))))
            if any(m == CLI or m.startswith(f"{CLI}.") for m in imported):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
