"""perfbisect: automated performance-regression bisection for GPU kernel libraries.

Everything installs under this one package: `perfbisect.cli` (the `perfbisect` command),
`perfbisect.service` (API, models, planner, statistics, reports), `perfbisect.workers` (Celery
tasks, checkout, build, sandbox), `perfbisect.kernels` (the harness run at each revision: torch,
numpy and triton only), `perfbisect.migrations` and `perfbisect.dashboards`. In the repository they are top-level
folders; setup.py maps them into the package when it is built. Run from a checkout (an
editable install, or PYTHONPATH=<checkout> on a GPU node), this file makes the same names
resolve to those folders. Importing it imports nothing else.
"""
from pathlib import Path as _Path

__version__ = "0.1.0"

_checkout = _Path(__file__).resolve().parent.parent
if not (_Path(__file__).resolve().parent / "service").is_dir() and (_checkout / "service" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 - a package's __path__
