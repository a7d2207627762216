"""The CLI's own commands: simulate, measure, demo-repo, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.kernels import demo
from perfbisect.cli.main import app

runner = CliRunner()

HISTORY = {
    "commits": 60, "samples_per_trial": 20, "process_drift_cv": 0.02,
    "control": {"value": 1252.0, "cv": 0.01},
    "cases": {"S=180180": {"cv": 0.02, "levels": [[0, 1288.2], [23, 1188.1]]},
              "S=61380": {"cv": 0.02, "levels": [[0, 1284.6]]}},
    "unbuildable": [40, 41], "higher_is_better": True,
}


def test_simulate_json_names_the_step(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text(json.dumps(HISTORY))
    result = runner.invoke(app, ["simulate", str(path), "--workers", "4", "--seed", "3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [c["range"] for c in out["culprits"]] == [[23, 23]]
    assert set(out["culprits"][0]["cases"]) == {"S=180180", "S=61380"}
    assert out["culprits"][0]["cases"]["S=180180"]["rel"] < -0.05
    assert out["revisions_measured"] <= 1 * 6 + 2 + 2 + 6  # k*ceil(log2 N) + 2k + 2, plus W-1 extra per round


def test_simulate_bad_history_is_a_message(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text(json.dumps({**HISTORY, "cases": {"S=1": {"cv": 0.02}}}))
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exit_code == 2
    assert "levels" in result.output
    assert runner.invoke(app, ["simulate", str(tmp_path / "missing.json")]).exit_code == 2


def test_measure_prints_a_table_and_json(demo_repo: Path) -> None:
    args = ["measure", "--repo", str(demo_repo), "--rev", "HEAD", "--suite", "rmsnorm",
            "--target", demo.RMSNORM_TARGET, "--case", "M=256,N=256,dtype=fp32"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    trial = json.loads(result.output)
    assert trial["status"] == "ok" and trial["cases"][0]["status"] == "ok"
    assert trial["cases"][0]["metric"]["name"] == "GB/s"
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "rmsnorm M=256,N=256,dtype=fp32" in table.output


def test_measure_bad_case_and_bad_rev_are_messages(demo_repo: Path) -> None:
    base = ["measure", "--repo", str(demo_repo), "--suite", "gemm", "--target", demo.GEMM_TARGET]
    bad_case = runner.invoke(app, [*base, "--rev", "HEAD", "--case", "M=64;N=64"])
    assert bad_case.exit_code == 2 and "bad --case" in bad_case.output
    bad_rev = runner.invoke(app, [*base, "--rev", "no-such-rev", "--case", "M=64,N=64,K=64,dtype=fp32"])
    assert bad_rev.exit_code == 2 and "does not resolve" in bad_rev.output


def test_demo_repo_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, ["demo-repo", str(tmp_path)])
    assert result.exit_code == 2 and "not empty" in result.output


@pytest.mark.parametrize("mode", [[], ["--track"]])
def test_demo_refuses_a_path_that_is_not_the_demo_repository(tmp_path: Path, mode: list[str]) -> None:
    (tmp_path / "mine.py").write_text("x = 1\n")
    result = runner.invoke(app, ["demo", *mode, "--path", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 2 and "is not the demo repository" in result.output, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["mine.py"]  # nothing written beside it


def test_doctor_reports_the_device_and_refuses_a_class_this_host_cannot_serve() -> None:
    from perfbisect.kernels.harness.devices import ROCM_ONLY

    listed = runner.invoke(app, ["doctor", "--device", "cpu", "--no-flush-check"])
    assert listed.exit_code == 0, listed.output
    assert "vendor cpu" in listed.output and f"suite flydsl_gemm: {ROCM_ONLY}" in listed.output
    assert "FLYDSL_RUNTIME_CACHE_DIR" in listed.output and "flush self-check: skipped" in listed.output
    refused = runner.invoke(app, ["doctor", "--device", "cpu", "--device-class", "rocm", "--no-flush-check"])
    assert refused.exit_code == 1 and "needs an AMD GPU (ROCm torch); this host has no GPU" in refused.output
    assert runner.invoke(app, ["doctor", "--device", "tpu"]).exit_code != 0


def test_a_rocm_worker_on_a_host_without_an_amd_gpu_refuses_to_start(monkeypatch) -> None:
    """The start check runs before the worker takes a message: this host has no AMD GPU, so a
    rocm worker leaves with the doctor's reason instead of failing every trial (or measuring on
    the wrong vendor). The broker is never reached."""
    from perfbisect.service.settings import get_settings

    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    get_settings.cache_clear()
    try:
        result = runner.invoke(app, ["worker", "--device-class", "rocm", "--no-control"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code != 0
    assert "needs an AMD GPU (ROCm torch)" in result.output and "cannot serve device class 'rocm'" in result.output


def test_bisect_refuses_a_bad_scan_before_submitting() -> None:
    """Issue 46: --scan is a number or auto, and --max-gap goes with --scan auto."""
    base = ["bisect", "--repo", "lib", "--good", "v1", "--bad", "main", "--suite", "gemm", "--target", "m:f",
            "--shape", "M=64,N=64,K=64,dtype=fp32"]
    word = runner.invoke(app, [*base, "--scan", "most"])
    assert word.exit_code == 2, word.output
    assert "--scan is a number of interior revisions (0 to 32) or auto" in word.output
    many = runner.invoke(app, [*base, "--scan", "40"])
    assert many.exit_code == 2 and "less than or equal to 32" in many.output, many.output
    loose = runner.invoke(app, [*base, "--scan", "4", "--max-gap", "3"])
    assert loose.exit_code == 2 and "max_gap goes with scan" in loose.output, loose.output
    tight = runner.invoke(app, [*base, "--scan", "auto", "--max-gap", "0"])
    assert tight.exit_code == 2 and "max_gap" in tight.output, tight.output
