"""The demo kernel repository (minikern) with planted regressions, and its cases.

    write_demo_repo(path) -> path      a git repository of 49 first-parent commits
    DEMO_CPU_CASES / DEMO_GPU_CASES    [{suite, target, params}] for bisecting it
    DEMO_CPU_POLICY / DEMO_GPU_POLICY  sample policies sized for those cases
    DEMO_BUILD_COMMAND                 a build command that fails on syntax errors
    DEMO_IMPORT_ROOT                   "."
"""
from __future__ import annotations

GEMM_TARGET = "minikern.gemm:matmul"
ATTENTION_TARGET = "minikern.attention:attention"
RMSNORM_TARGET = "minikern.rmsnorm:rms_norm"


def _case(suite: str, target: str, **params) -> dict:
    return {"suite": suite, "target": target, "params": params}


# Sized so one CPU trial (a fresh process, torch import included) takes about 3 s.
DEMO_CPU_CASES = [
    _case("gemm", GEMM_TARGET, M=512, N=512, K=512, dtype="bf16"),
    _case("gemm", GEMM_TARGET, M=256, N=256, K=520, dtype="fp32"),
    _case("attention", ATTENTION_TARGET, B=1, H=1, S=1024, D=64, causal=False, dtype="fp32"),
    _case("attention", ATTENTION_TARGET, B=1, H=2, S=256, D=64, causal=False, dtype="fp32"),
    _case("rmsnorm", RMSNORM_TARGET, M=1024, N=1024, dtype="fp32"),
]

DEMO_GPU_CASES = [
    _case("gemm", GEMM_TARGET, M=2048, N=2048, K=2048, dtype="bf16"),
    _case("gemm", GEMM_TARGET, M=4096, N=4096, K=8192, dtype="bf16"),
    _case("gemm", GEMM_TARGET, M=8192, N=8192, K=8192, dtype="bf16"),
    _case("gemm", GEMM_TARGET, M=16384, N=16384, K=4096, dtype="bf16"),
    _case("gemm", GEMM_TARGET, M=4096, N=4096, K=4120, dtype="bf16"),
    _case("attention", ATTENTION_TARGET, B=2, H=32, S=1024, D=128, causal=False, dtype="bf16"),
    _case("attention", ATTENTION_TARGET, B=2, H=32, S=4096, D=128, causal=False, dtype="bf16"),
    _case("attention", ATTENTION_TARGET, B=2, H=32, S=16384, D=128, causal=False, dtype="bf16"),
    _case("rmsnorm", RMSNORM_TARGET, M=16384, N=8192, dtype="bf16"),
]

DEMO_CPU_POLICY = {"min_samples": 7, "max_samples": 15, "max_time_s": 0.25, "rel_noise": 0.01,
                   "warmup": 2, "threads": 1}
DEMO_GPU_POLICY = {"min_samples": 10, "max_samples": 30, "max_time_s": 0.5, "rel_noise": 0.005,
                   "warmup": 3}
DEMO_BUILD_COMMAND = "{python} -m compileall -q minikern"
DEMO_IMPORT_ROOT = "."


def write_demo_repo(path):
    """Write the demo repository at `path` and return its Path (see writer.py)."""
    from pathlib import Path

    from perfbisect.kernels.demo.writer import write_demo_repo as _write
    return _write(Path(path))


__all__ = ["DEMO_BUILD_COMMAND", "DEMO_CPU_CASES", "DEMO_CPU_POLICY", "DEMO_GPU_CASES",
           "DEMO_GPU_POLICY", "DEMO_IMPORT_ROOT", "write_demo_repo"]
