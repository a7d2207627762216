"""The suite's own layout: `make test` runs the timed e2e tests first, the fault tests one after
another on one xdist worker and the other timed ones on the other (tests.isolation.group_timed_e2e).
With pytest 9.2 and pytest-xdist 3.8 that grouping was silently ignored
(pytest-dev/pytest-xdist#1386): two demo bisects could run at once, each measuring the other.
This runs a small suite through the same hook the way `make test` does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = """
import pytest
from tests.isolation import group_timed_e2e

def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: real processes")
    config.addinivalue_line("markers", "untimed: times nothing")
    config.addinivalue_line("markers", "faults: a fault test")

@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(items):
    group_timed_e2e(items)
"""

TESTS = """
import time
import pytest

@pytest.mark.parametrize("i", range(4))
def test_unit(i):
    time.sleep(0.05)

@pytest.mark.e2e
@pytest.mark.parametrize("i", range(4))
def test_timed(i):
    time.sleep(0.2)

@pytest.mark.e2e
@pytest.mark.faults
@pytest.mark.parametrize("i", range(3))
def test_fault(i):
    time.sleep(0.2)

@pytest.mark.e2e
@pytest.mark.untimed
@pytest.mark.parametrize("i", range(4))
def test_untimed(i):
    time.sleep(0.2)
"""


def test_the_timed_e2e_tests_run_first_in_two_groups_of_a_worker_each_and_the_rest_on_both(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_layout.py").write_text(TESTS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup", "-p",
                           "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(r"\[(gw\d)\] .*?PASSED test_layout.py::(test_\w+)\[(\d)\]", done.stdout)
    assert len(ran) == 15, done.stdout[-3000:]
    timed = [(worker, int(i)) for worker, name, i in ran if name == "test_timed"]
    faults = [(worker, int(i)) for worker, name, i in ran if name == "test_fault"]
    assert len({worker for worker, _ in timed}) == 1 and len({worker for worker, _ in faults}) == 1, ran
    assert {timed[0][0], faults[0][0]} == {"gw0", "gw1"}  # each group on a worker of its own, at once
    assert [i for _, i in timed] == [0, 1, 2, 3] and [i for _, i in faults] == [0, 1, 2]  # in order
    assert len({worker for worker, name, _ in ran if name not in ("test_timed", "test_fault")}) == 2  # the rest on both


def test_no_test_imports_the_conftest_as_a_module() -> None:
    """`from tests.conftest import ...` runs conftest a second time: under xdist it made a new,
    empty database and a new home and pointed DATABASE_URL at them, so later tests of that
    worker failed with 'relation does not exist' (test_clean_stop once did this)."""
    offenders = [p.name for p in (ROOT / "tests").rglob("*.py")
                 if re.search(r"^\s*(from tests\.conftest import|import tests\.conftest)", p.read_text(), re.M)]
    assert offenders == []
