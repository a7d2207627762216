"""The product's imports, read with `ast` (nothing is imported), named the way the wheel lays
them out (`perfbisect.<folder>.<module>`): the layering test checks them and
bench/import_cycles.py counts the cycles between service/ packages.

An import is module-level unless it sits in a function (its module imports it when it runs, not
when it is loaded) or under `if TYPE_CHECKING:` (never at run time)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The wheel's top-level folders (setup.py FOLDERS), the CLI's own package once it is one, and
# perfbisect/ itself (the package root and the modules shared by the layers: queue, dispatch, gitrepo).
FOLDERS = ("service", "workers", "kernels", "migrations", "dashboards", "cli", "perfbisect")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. perfbisect.service.jobs.service
    target: str  # the imported module (or package), e.g. perfbisect.service.models
    path: Path
    line: int
    module_level: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "perfbisect" else ["perfbisect", *parts])


def product_files() -> Iterator[Path]:
    for folder in FOLDERS:
        top = ROOT / folder
        if (top / "__init__.py").is_file():
            yield from sorted(p for p in top.rglob("*.py") if "static" not in p.relative_to(top).parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every import node with whether it runs when the module is loaded."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, not in_function
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, True)
        elif isinstance(child, ast.If) and _is_type_checking(child):
            yield from ((n, False) for n, _ in _walk(child, True))
        else:
            yield from _walk(child, in_function)


def _absolute(node: ast.ImportFrom, source: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, modules: frozenset[str]) -> Iterator[Import]:
    """The imports of one file; `from a import b` names the module a.b when b is one."""
    source = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    for node, module_level in _walk(tree, False):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _absolute(node, source, path.name == "__init__.py")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in dict.fromkeys(targets):
            yield Import(source, target, path, node.lineno, module_level)


def product_imports() -> list[Import]:
    files = list(product_files())
    modules = frozenset(module_name(p) for p in files)
    return [imp for path in files for imp in imports_of(path, modules)]


def service_unit(module: str) -> str | None:
    """The service/ package (or top-level module) a module belongs to: jobs, models, ..."""
    parts = module.split(".")
    if parts[:2] != ["perfbisect", "service"] or len(parts) < 3:
        return None
    return parts[2]


def service_cycles(imports: list[Import]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """The pairs of service/ units that import each other at module level, and the strongly
    connected groups (more than one unit) of that graph."""
    edges: dict[str, set[str]] = {}
    for imp in imports:
        a, b = service_unit(imp.source), service_unit(imp.target)
        if imp.module_level and a and b and a != b:
            edges.setdefault(a, set()).add(b)
            edges.setdefault(b, set())
    pairs = sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges[b])
    return pairs, _strongly_connected(edges)


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; only the groups of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(groups)
