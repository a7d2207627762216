"""Trial phases: the pure per-job summary, then a result's phases stored on the trial (real
PostgreSQL, migration 0002_gpu), read back through the API and shown on the job page."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.jobs import advance
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import Trial
from perfbisect.service.trials import service as trials
from perfbisect.service.trials.phases import PHASES, phase_table
from tests.factories import create_repository
from tests.gitrepo import make_repo

CASE = "gemm M=64,N=64,K=64,dtype=fp32"
PHASES_SEEN = {"checkout": 0.01, "build": 0.07, "start": 0.01, "import": 0.03, "compile": 0.5,
               "inputs_reference": 0.14, "timing": 0.3, "teardown": 0.02, "first_sample": 0.9,
               "timed_kernels": 0.03, "process": 1.0, "total": 1.08}


def test_phase_table_takes_medians_and_shares_of_the_phases() -> None:
    fast = {name: 1.0 for name in PHASES} | {"timed_kernels": 2.0, "first_sample": 3.0, "total": 8.0}
    slow = {name: 3.0 for name in PHASES} | {"timed_kernels": 2.0, "first_sample": 5.0, "total": 24.0}
    rows = {r.name: r for r in phase_table([fast, slow, fast, None])}
    assert [r.name for r in phase_table([fast])][:len(PHASES)] == list(PHASES)
    assert rows["compile"].median_s == 1.0 and rows["compile"].share == pytest.approx(1 / 8)
    assert rows["timed_kernels"].share == pytest.approx(2 / 8)
    assert rows["first_sample"].median_s == 3.0 and rows["first_sample"].share is None
    assert phase_table([None, {}]) == []


def result_with_phases() -> dict:
    case = {"suite": "gemm", "target": "minikern.gemm:matmul",
            "params": {"M": 64, "N": 64, "K": 64, "dtype": "fp32"},
            "name": CASE, "status": "ok", "error": None, "median_ratio": 1.0,
            "metric": {"name": "TFLOP/s", "higher_is_better": True, "target": 1.0, "control": 1.0},
            "target_ms": [1.0], "control_ms": [1.0], "ratio": [1.0], "accuracy_error": 1e-7}
    return {"status": "ok", "error": None, "cases": [case], "device": {"name": "test-cpu", "torch": "2.13"},
            "harness_version": "1", "wall_s": 1.0, "phases": PHASES_SEEN}


@pytest.fixture
def recorded(session, tmp_path: Path) -> Trial:
    make_repo(tmp_path / "lib", [f"change {i} (#{100 + i})" for i in range(3)])
    create_repository(session, tmp_path / "lib", name="lib")
    job = jobs.create_bisect(session, BisectCreate(
        repository="lib", good="HEAD~2", bad="main",
        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": [CASE.split(" ", 1)[1]]}]), SYSTEM)
    trial_id = advance.advance(session, job.id).trial_ids[0]
    trials.start(session, trial_id, worker_host="test")
    trial = trials.record(session, trial_id, result_with_phases(), build_s=0.07)
    session.flush()
    return trial


def test_phases_are_stored_on_the_trial_and_read_through_the_api(client, session, recorded) -> None:
    session.expire_all()
    assert session.get(Trial, recorded.id).phases == PHASES_SEEN
    (read,) = [t for t in client.get(f"/api/jobs/{recorded.job_id}/trials").json() if t["id"] == recorded.id]
    assert read["phases"] == PHASES_SEEN


def test_job_page_shows_where_trial_time_goes(client, recorded) -> None:
    html = client.get(f"/dashboard/jobs/{recorded.job_id}").text
    assert "Where trial time goes" in html
    assert "<td>compile</td><td class=\"num\">0.500</td>" in html
