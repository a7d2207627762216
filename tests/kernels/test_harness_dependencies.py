"""kernels/ (the harness and suites that run at every revision, on GPU nodes' stock images) imports
with only torch, triton and numpy besides the standard library: every module of the package is
imported in a fresh interpreter where the service's dependencies cannot be imported."""

from __future__ import annotations

import subprocess
import sys

# The service stack (pyproject's dependencies beyond torch and numpy) and perfbisect's other packages.
BLOCKED = ("sqlalchemy", "alembic", "psycopg", "pydantic", "pydantic_settings", "fastapi", "starlette", "uvicorn",
           "celery", "kombu", "redis", "git", "httpx", "typer", "rich", "tenacity", "scipy")
BLOCKED_OWN = ("perfbisect.service", "perfbisect.workers", "perfbisect.dashboards", "perfbisect.migrations",
               "perfbisect.dispatch", "perfbisect.queue", "perfbisect.gitrepo")

CODE = f"""
import importlib, importlib.abc, pkgutil, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r} or name.startswith({BLOCKED_OWN!r}):
            raise ImportError(f"{{name}} is not installed on a GPU node's stock image")
        return None

sys.meta_path.insert(0, Blocked())
import perfbisect.kernels
for module in pkgutil.walk_packages(perfbisect.kernels.__path__, "perfbisect.kernels."):
    if module.name != "perfbisect.kernels.harness.__main__":
        importlib.import_module(module.name)
print("imported", len([m for m in sys.modules if m.startswith("perfbisect.kernels")]))
"""


def test_kernels_imports_with_torch_triton_and_numpy_only() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 20
