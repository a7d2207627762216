"""The CLI as real processes: Ctrl-C in `perfbisect bisect` (embedded) cancels the job instead of
leaving it running forever; `perfbisect serve` creates a PERFBISECT_HOME that does not exist yet."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from perfbisect.kernels import demo
from perfbisect.cli.common import CANCELLED, INTERRUPTED
from tests.e2e_support import BIN, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.untimed]  # they wait for events, they time nothing


def _a_trial_finished(database: Path) -> bool:
    try:
        with sqlite3.connect(database) as conn:
            return conn.execute("SELECT count(*) FROM trials WHERE status != 'pending' AND status != 'running'").fetchone()[0] > 0
    except sqlite3.Error:  # not created or not migrated yet
        return False


def test_ctrl_c_cancels_the_embedded_job(demo_repo: Path, tmp_path: Path) -> None:
    env = service_env(tmp_path / "home", None, None)
    args = ["bisect", "--repo", str(demo_repo), "--good", "HEAD~3", "--bad", "HEAD", "--suite", "gemm",
            "--target", demo.GEMM_TARGET, "--shape", "M=64,N=64,K=64,dtype=fp32",
            "--policy", json.dumps({"max_time_s": 0.2, "min_samples": 5, "max_samples": 10})]
    # a shell's background job ignores SIGINT; this one gets it as a terminal's Ctrl-C would deliver it
    proc = subprocess.Popen([str(BIN / "perfbisect"), *args], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not _a_trial_finished(tmp_path / "home" / "perfbisect.sqlite") and time.monotonic() < deadline:
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == INTERRUPTED, err[-3000:]
    assert "interrupted: job 1 cancelled" in err and "Traceback" not in err
    shown = subprocess.run([str(BIN / "perfbisect"), "show", "1"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == CANCELLED and "job 1 (bisect, cancelled)" in shown.stdout


def test_serve_creates_a_missing_home(tmp_path: Path) -> None:
    import httpx

    from tests.e2e_support import free_port, perfbisect, stop

    home = tmp_path / "not" / "yet"
    port = free_port()
    server = perfbisect("serve", "--port", str(port), env=service_env(home, None, None), log=tmp_path / "serve.log")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            raise AssertionError((tmp_path / "serve.log").read_text()[-3000:])
    finally:
        stop(server)
    assert (home / "perfbisect.sqlite").exists()
