"""A target is a callable of the measured repository (or of the job's suite file), never of the
interpreter the harness runs on: `os:system`, `subprocess:run` or `torch.hub:load` name code
that is already there at every revision, so they measure nothing and only hand a submitter the
worker's Python. Refused with 422:
- for everyone: a module of Python's standard library (or a built-in one) and perfbisect itself;
- for a submit token: a top-level package installed in the service's environment (torch, numpy,
  celery...). An admin (or a benchmark set an admin registered) may name one: bisecting triton
  itself measures a repository that shadows the installed triton.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from importlib.metadata import packages_distributions

from perfbisect.service.auth.principal import Principal
from perfbisect.service.errors import BadRequest

OWN = frozenset({"perfbisect", "__main__", "builtins"})


@lru_cache
def _installed() -> frozenset[str]:
    return frozenset(packages_distributions())


def check_target(target: str, submitter: Principal) -> None:
    """Raises BadRequest when `target` ('module.path:function') names a module that is not the
    repository's (see the module docstring)."""
    top = target.partition(":")[0].split(".")[0]
    if top in OWN or top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise BadRequest(f"target {target!r} names Python's own module {top!r}, not the measured repository: a target "
                         "is a callable of the repository (or of the job's suite file)")
    if top in _installed() and not submitter.is_admin:
        raise BadRequest(f"target {target!r} names the installed package {top!r}, not the measured repository: "
                         "a target is a callable of the repository (an admin, or a benchmark set an admin "
                         "registered, may name a package the repository shadows)")


def check_targets(cases: list[dict], submitter: Principal) -> None:
    for target in dict.fromkeys(c["target"] for c in cases):
        check_target(target, submitter)
