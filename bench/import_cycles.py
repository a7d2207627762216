"""The module-level import cycles between service/ packages, read with `ast` (tests/import_graph.py):
the pairs of packages that import each other, and the groups that import each other in a ring.

    python bench/import_cycles.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.import_graph import product_imports, service_cycles  # noqa: E402


def main() -> None:
    pairs, groups = service_cycles(product_imports())
    print(f"{len(pairs)} pairs of service/ packages import each other at module level:")
    for a, b in pairs:
        print(f"  {a} <-> {b}")
    print(f"{len(groups)} cycle groups (strongly connected, 2+ packages):")
    for group in groups:
        print(f"  {len(group)}: {' '.join(group)}")


if __name__ == "__main__":
    main()
