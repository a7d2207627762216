"""Heavy imports: a suite's PRELOAD is read without running the file, and the trials of one
revision are forked from a server of that revision which imported those modules from its own
worktree; another revision gets another server, a module that fails to import is left to the
trial, and PERFBISECT_TRIAL_PRELOAD=off keeps every import in the trial."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from perfbisect.kernels.harness.caches import revision_caches
from perfbisect.kernels.harness.launch import _servers, fork_available, stop_servers
from perfbisect.kernels.harness.preload import declared_preload, import_preloaded, trial_preload
from perfbisect.kernels.harness.runner import run_harness
from perfbisect.kernels.report import format_result
from tests.kernels.conftest import CUSTOM_SUITE, write_files

PROBE = """
    import json
    import os
    import sys

    IMPORTED_BY = os.getpid()        # the process that imported this module


    def probe(x, y):
        with open(os.environ["PROBE_OUT"], "w") as out:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "imported_by": IMPORTED_BY,
                       "file": __file__, "broken_loaded": "probekern.broken" in sys.modules}, out)
        return x * (1 - y * y)
"""
POLICY = {"min_samples": 3, "max_samples": 3, "max_time_s": 0.05, "rel_noise": 0.5, "warmup": 0}


def test_preload_is_read_from_the_suite_file_without_running_it():
    assert declared_preload("import no_such_module\nPRELOAD = ['sympy', 'sympy.stats']\n") == ("sympy", "sympy.stats")
    assert declared_preload("PRELOAD = ('a',)\n") == ("a",)
    assert declared_preload("METRIC = 'kcall/s'\n") == ()
    assert declared_preload("def broken(:\n") == ()
    with pytest.raises(ValueError, match="literal list"):
        declared_preload("PRELOAD = modules()\n")
    with pytest.raises(ValueError, match="names no module"):
        declared_preload("PRELOAD = ['sympy; rm -rf']\n")


def test_the_mode_follows_the_suite_adds_targets_or_preloads_nothing(tmp_path):
    write_files(tmp_path, {"bench/s.py": "PRELOAD = ['lib_a']\n"})
    spec = {"cases": [{"suite": "file:bench/s.py", "target": "pkg.ops:f"},
                      {"suite": "source:t.py@abc", "source": "abc", "target": "other:g"},
                      {"suite": "gemm", "target": "pkg.ops:h"}],
            "suite_sources": {"abc": "PRELOAD = ['lib_b', 'lib_a']\n"}}
    assert trial_preload(spec, tmp_path, "auto") == ("lib_a", "lib_b")
    assert trial_preload(spec, tmp_path, "on") == ("lib_a", "pkg", "lib_b", "other")
    assert trial_preload(spec, tmp_path, "off") == ()
    escaping = {"cases": [{"suite": "file:../outside.py", "target": "m:f"}]}
    (tmp_path.parent / "outside.py").write_text("PRELOAD = ['x']\n")
    assert trial_preload(escaping, tmp_path, "auto") == ()
    with pytest.raises(ValueError, match="PERFBISECT_TRIAL_PRELOAD"):
        trial_preload(spec, tmp_path, "always")


def test_a_module_that_fails_to_import_leaves_nothing_behind(tmp_path, monkeypatch):
    write_files(tmp_path, {"halfpkg/__init__.py": "", "halfpkg/good.py": "",
                           "halfpkg/bad.py": "import halfpkg.good\nraise RuntimeError('broken at this revision')\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded, failed = import_preloaded(["halfpkg.bad", "json"])
    assert loaded == ["json"]
    assert failed == {"halfpkg.bad": "RuntimeError: broken at this revision"}
    assert not any(name.startswith("halfpkg") for name in sys.modules)


@pytest.fixture()
def revisions(tmp_path):
    """Two checkouts (revisions) of a repository whose suite preloads probekern.ops."""
    suite = CUSTOM_SUITE + "\n    PRELOAD = ['probekern.ops', 'probekern.broken']\n"
    first = write_files(tmp_path / "rev1", {"bench/s.py": suite, "src/probekern/__init__.py": "",
                                            "src/probekern/ops.py": PROBE,
                                            "src/probekern/broken.py": "raise ImportError('not at this revision')\n"})
    second = tmp_path / "rev2"
    shutil.copytree(first, second)
    yield first, second
    stop_servers()


def trial(repo, tmp_path, sha, preload="auto", name="p.json"):
    out = tmp_path / name
    spec = {"cases": [{"suite": "file:bench/s.py", "target": "probekern.ops:probe", "params": {"N": 1024}}],
            "device": "cpu", "policy": POLICY, "seed": 3}
    caches = revision_caches(tmp_path / "cache", sha) if sha else None
    result = run_harness(spec, repo, import_root="src", env={"PROBE_OUT": str(out)}, timeout_s=120,
                         launcher="fork-server", caches=caches, preload=preload)
    assert result["status"] == "ok", result
    return result, json.loads(out.read_text())


@pytest.mark.skipif(not fork_available(), reason="the fork server needs Linux fork")
def test_trials_of_a_revision_start_with_its_modules_imported_by_its_own_server(revisions, tmp_path):
    first, second = revisions
    result1, seen1 = trial(first, tmp_path, "a" * 40)
    result2, seen2 = trial(first, tmp_path, "a" * 40)
    assert result1["preloaded"] == ["probekern.ops"]          # the broken module was left out
    assert "via fork-server (preloaded by the revision's server: probekern.ops)" in format_result(result1)
    assert not seen1["broken_loaded"]
    # fresh processes, forked by one server that had imported the revision's module
    assert seen1["pid"] != seen2["pid"] and seen1["ppid"] == seen2["ppid"]
    assert seen1["imported_by"] == seen2["imported_by"] == seen1["ppid"]
    assert seen1["file"].startswith(str(first.resolve()))
    _, other = trial(second, tmp_path, "b" * 40)
    assert other["ppid"] != seen1["ppid"] and other["imported_by"] == other["ppid"]
    assert other["file"].startswith(str(second.resolve()))
    # the first revision's server had no trial running: it was stopped
    assert sum(1 for key in _servers if key[1] == "revision") == 1


@pytest.mark.skipif(not fork_available(), reason="the fork server needs Linux fork")
def test_off_or_no_known_revision_leaves_every_import_to_the_trial(revisions, tmp_path):
    first, _ = revisions
    for preload, sha in (("off", "a" * 40), ("auto", None)):
        result, seen = trial(first, tmp_path, sha, preload)
        assert "preloaded" not in result and seen["imported_by"] == seen["pid"]
