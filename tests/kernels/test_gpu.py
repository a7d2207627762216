"""GPU path of the harness: CUDA events, L2 flush, SM clocks, Triton kernels of the demo."""
from __future__ import annotations

import pytest
import torch

from perfbisect.kernels.demo import DEMO_GPU_POLICY
from perfbisect.kernels.harness.result import validate_result
from perfbisect.kernels.harness.runner import run_harness
from perfbisect.workers import slotpolicy

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_demo_kernels_on_the_gpu(demo):
    cases = [{"suite": "gemm", "target": "minikern.gemm:matmul",
              "params": {"M": 1024, "N": 1024, "K": 1024, "dtype": "bf16"}},
             {"suite": "attention", "target": "minikern.attention:attention",
              "params": {"B": 1, "H": 4, "S": 512, "D": 64, "causal": True, "dtype": "bf16"}},
             {"suite": "rmsnorm", "target": "minikern.rmsnorm:rms_norm",
              "params": {"M": 1024, "N": 4096, "dtype": "bf16"}}]
    res = run_harness({"cases": cases, "device": "cuda", "policy": DEMO_GPU_POLICY},
                      demo.worktree(demo.shas[-1]), timeout_s=600)
    validate_result(res)
    assert res["status"] == "ok" and res["device"]["l2_bytes"] > 0
    for case in res["cases"]:
        assert case["status"] == "ok", case
        assert case["metric"]["target"] > 0 and case["metric"]["control"] > 0


SMALL_ATTENTION = [{"suite": "attention", "target": "minikern.attention:attention",
                    "params": {"B": 1, "H": 4, "S": 512, "D": 64, "causal": False, "dtype": "bf16"}}]


def test_forked_trials_make_their_own_cuda_context_and_share_the_revision_jit_cache(demo, tmp_path):
    from perfbisect.kernels.harness.caches import revision_caches

    sha = demo.shas[-1]
    caches = revision_caches(tmp_path / "cache", sha)
    spec = {"cases": SMALL_ATTENTION, "device": "cuda", "policy": DEMO_GPU_POLICY, "seed": 3}
    first, second = (run_harness(spec, demo.worktree(sha), timeout_s=600, caches=caches,
                                 launcher="fork-server") for _ in range(2))
    for res in (first, second):
        validate_result(res)
        assert res["status"] == "ok" and res["launcher"] == "fork-server", res.get("log_tail")
        assert res["cases"][0]["status"] == "ok"
    assert any(caches.jit_dir.iterdir())  # the first trial compiled into the revision's cache
    assert second["phases"]["compile"] < first["phases"]["compile"]
    assert second["reference_cache"]["hits"] == 1


def test_a_contained_forked_trial_uses_the_gpu_under_the_data_cap(demo, tmp_path, monkeypatch):
    """What a worker does by default: the trial forked from a fork server that runs as the sandbox
    user (when this is root and that user can run this interpreter) under RLIMIT_DATA."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from perfbisect.kernels.harness import launch
    from perfbisect.service.settings import get_settings
    from perfbisect.workers import sandbox

    shared = Path(tempfile.mkdtemp(prefix="perfbisect-gpu-sandbox-"))
    shared.chmod(0o755)
    # the slots and the revision caches where the sandbox user can reach them (a worker's home
    # is so by the README's setup; this user's own, e.g. /root/.perfbisect, is not)
    monkeypatch.setattr(get_settings(), "sandbox_dir", shared)
    monkeypatch.setattr(get_settings(), "home", shared)
    spec = {"cases": SMALL_ATTENTION, "device": "cuda", "policy": DEMO_GPU_POLICY, "seed": 3}
    try:
        with sandbox.slot(user=slotpolicy.lookup_user("nobody") if os.geteuid() == 0 else None) as box:
            shutil.copytree(demo.worktree(demo.shas[-1]), box.worktree, ignore=shutil.ignore_patterns(".git"))
            box.give(box.worktree)
            results = [run_harness(spec, box.worktree, timeout_s=600, base_env=box.env({}), scratch_root=box.scratch,
                                   launch=box.launcher("data")) for _ in range(2)]
            user = box.user
    finally:
        launch.stop_servers()
        shutil.rmtree(shared, ignore_errors=True)
    for res in results:
        validate_result(res)
        assert res["status"] == "ok" and res["launcher"] == "sandbox-fork-server", res.get("log_tail")
        assert res["cases"][0]["status"] == "ok"
    print(f"contained fork server as {user.name if user else 'this user'}: first sample "
          f"{[r['phases'].get('first_sample') for r in results]} s, process {[r['phases']['process'] for r in results]} s")


def test_the_cold_flush_is_measurably_cold_and_an_undersized_one_is_refused():
    """The flush self-check on this GPU: the device layer's flush (every cache level, twice) is
    proven cold; a 1 MiB flush, which leaves a buffer half the last-level cache's size cached
    (as the seed's L2-sized flush left the MI355X's 256 MB MALL warm), is refused."""
    from perfbisect.kernels.harness.flushcheck import check_flush

    proven = check_flush("cuda")
    print(f"flush check: {proven}")
    assert proven.status == "cold", proven.reason
    undersized = check_flush("cuda", flush_bytes=1 << 20)
    print(f"undersized flush: {undersized}")
    assert undersized.refused, undersized.reason


def test_the_device_layer_describes_this_gpu_and_the_doctor_accepts_its_class():
    import subprocess
    import sys

    from perfbisect.kernels.harness.provenance import (
        describe_device,
        gpu_vendor,
        open_clock,
    )

    info = describe_device("cuda")
    vendor = gpu_vendor()
    assert info["vendor"] == vendor and info["flush_bytes"] >= 2 * info["caches"][-1]["total_bytes"]
    telemetry = open_clock("cuda").telemetry()
    print(f"{info['name']}: caches {info['caches']}, telemetry {telemetry}")
    own, other = ("rocm", "cuda") if vendor == "amd" else ("cuda", "rocm")
    doctor = [sys.executable, "-m", "perfbisect.kernels.harness.doctor", "--device", "cuda", "--device-class"]
    accepted = subprocess.run(doctor + [own], capture_output=True, text=True, timeout=600)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    refused = subprocess.run(doctor + [other, "--no-flush-check"], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 1 and f"device class '{other}' needs" in refused.stdout
