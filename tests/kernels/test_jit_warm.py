"""The fork server fills Triton's per-process caches that need no GPU (the hash of Triton's own
install, the ptxas version) before it forks, so no trial recomputes them at its first compile.
A stand-in `triton` package records each computation with the pid that made it."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from perfbisect.kernels.harness.contain import forkserver, zygote
from perfbisect.kernels.harness.launch import fork_available

FAKE_CACHE = '''
import functools, os

@functools.lru_cache()
def triton_key():
    with open(os.environ["PERFBISECT_TEST_WARM_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
    return "key"
'''


@pytest.fixture
def fake_triton(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `triton` package of one lru-cached triton_key that logs each computation; the log."""
    if "triton" in sys.modules or any((Path(p) / "triton").is_dir() for p in sys.path if p):
        pytest.skip("the real Triton is installed here")
    (tmp_path / "triton" / "runtime").mkdir(parents=True)
    (tmp_path / "triton" / "__init__.py").write_text("")
    (tmp_path / "triton" / "runtime" / "__init__.py").write_text("")
    (tmp_path / "triton" / "runtime" / "cache.py").write_text(FAKE_CACHE)
    log = tmp_path / "warm.log"
    monkeypatch.setenv("PERFBISECT_TEST_WARM_LOG", str(log))
    return log


def test_warming_computes_the_install_hash_once_where_triton_is_imported(fake_triton, tmp_path, monkeypatch):
    assert zygote.warm_jit() == []  # no Triton imported: nothing to warm
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        import triton  # noqa: F401 - the stand-in

        assert zygote.warm_jit() == ["triton.runtime.cache.triton_key"]
        from triton.runtime.cache import triton_key

        assert triton_key() == "key"  # cached: not computed again
        assert fake_triton.read_text().split() == [str(os.getpid())]
    finally:
        for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
            del sys.modules[name]


@pytest.mark.skipif(not fork_available(), reason="the fork server needs Linux fork")
def test_the_fork_server_warms_triton_before_it_forks(fake_triton, tmp_path, monkeypatch):
    """The hash is computed once, by the server, before it says it is ready: every trial it forks
    inherits the cached value."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    server = forkserver.ForkServer(env)
    try:
        assert "triton" in server.hello["preloaded"]
        assert fake_triton.read_text().split() == [str(server.hello["pid"])]
    finally:
        server.stop()
