"""The harness side of a culprit's evidence (issue 43): the Triton JIT-cache parsers on recorded
cache contents (NVIDIA: json, ttir, ttgir, llir, ptx; AMD: amdgcn), the profiler's table on
recorded traces, and a profiled trial on the CPU (the failure paths are notes, never errors)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from perfbisect.kernels import demo as demo_pkg
from perfbisect.kernels.harness import jitcache, profiling
from perfbisect.kernels.harness.result import validate_result
from perfbisect.kernels.harness.runner import run_harness

DATA = Path(__file__).resolve().parent.parent / "data"
CACHE = DATA / "triton_cache"


def _only(root: Path) -> dict:
    (kernel,) = jitcache.read_cache(root)["kernels"]
    return kernel


def test_nvidia_cache_metadata_and_op_histograms() -> None:
    before, after = _only(CACHE / "nvidia_before"), _only(CACHE / "nvidia_after")
    assert before["name"] == "softmax_kernel" and before["ir_levels"] == ["llir", "ptx", "ttgir", "ttir"]
    meta = before["metadata"]
    assert (meta["num_warps"], meta["num_stages"], meta["num_ctas"], meta["shared"]) == (4, 3, 1, 0)
    assert meta["target"] == "cuda:90" and meta["enable_fp_fusion"] is True
    assert after["metadata"]["num_stages"] == 4 and after["metadata"]["shared"] == 16
    # the approximate exp2 of the TTGIR and PTX gives way to the precise exp
    assert before["ops"]["ttgir"]["math.exp2"] == 1 and "math.exp" not in before["ops"]["ttgir"]
    assert after["ops"]["ttgir"]["math.exp"] == 1 and "math.exp2" not in after["ops"]["ttgir"]
    assert before["ops"]["ptx"]["ex2.approx.f32"] == 4 and "ex2.approx.ftz.f32" not in before["ops"]["ptx"]
    assert after["ops"]["ptx"]["ex2.approx.ftz.f32"] == 2 and after["ops"]["ptx"]["fma.rn.f32"] == 6
    assert before["ops"]["llir"]["call @llvm.nvvm.ex2.approx.f"] == 2
    assert after["ops"]["llir"]["call @__nv_expf"] == 2
    # ops, not attributes, labels or directives
    assert before["ops"]["ttgir"]["tt.load"] == 1 and before["ops"]["ttgir"]["tt.reduce.return"] == 2
    assert not any(op.startswith(("#", "ttg.blocked", "module")) for op in before["ops"]["ttgir"])
    assert "ld.global.v4.b32" in before["ops"]["ptx"] and not any(op.startswith(".") for op in before["ops"]["ptx"])
    assert before["ttgir"].startswith("#blocked") and before["ttgir_truncated"] is False


def test_amd_cache_registers_spills_and_mfma() -> None:
    kernel = _only(CACHE / "amd")
    meta = kernel["metadata"]
    assert meta["target"] == "hip:gfx942" and meta["waves_per_eu"] == 2 and meta["shared"] == 32768
    assert (meta["n_regs"], meta["n_sgprs"], meta["n_spills"], meta["occupancy"]) == (128, 24, 0, 3)
    assert kernel["ops"]["amdgcn"]["v_mfma_f32_16x16x16_bf16"] == 2
    assert kernel["ops"]["amdgcn"]["global_load_dwordx4"] == 2 and "matmul_kernel" not in kernel["ops"]["amdgcn"]
    assert kernel["ops"]["ttgir"]["tt.dot"] == 1 and kernel["ops"]["ttgir"]["ttg.local_alloc"] == 2


def test_cache_without_ir_files_or_kernels_is_a_note(tmp_path: Path) -> None:
    found = jitcache.read_cache(CACHE / "no_ir")
    assert [k["name"] for k in found["kernels"]] == ["rmsnorm_kernel"]  # the launcher stub is no kernel
    assert found["kernels"][0]["ops"] == {} and "no IR files" in found["note"]
    assert "no Triton kernel" in jitcache.read_cache(tmp_path)["note"]
    assert "no Triton JIT cache" in jitcache.read_cache(tmp_path / "absent")["note"]


def test_kernel_table_from_recorded_cuda_trace() -> None:
    events = json.loads((DATA / "profiler" / "cuda_trace.json").read_text())["traceEvents"]
    table = profiling.kernel_table(events, calls=5, device="cuda")
    assert [r["name"] for r in table] == ["_layer_norm_bwd_kernel", "_layer_norm_bwd_dwdb", "Memset (Device)"]
    top = table[0]
    assert top["calls"] == 5 and top["total_ms"] == pytest.approx(6.2025) and top["mean_ms"] == pytest.approx(1.2405)
    assert top["per_call_ms"] == pytest.approx(1.2405)
    assert top["grid"] == [8192, 1, 1] and top["block"] == [128, 1, 1]
    assert table[2]["grid"] is None  # a memset has no launch geometry


def test_one_slow_launch_does_not_hide_the_step() -> None:
    """Recorded: gemm 2048^3 at #930's ends, five launches each, one at idle clocks before and one
    behind a co-tenant after. By mean both ends read 36 us (the nineteenth session's "+0.025 us
    per call" on the H100); the median launch shows the 30 -> 33 us step."""
    from perfbisect.service.evidence import diff

    def table(name):
        events = json.loads((DATA / "profiler" / f"cuda_trace_ramp_{name}.json").read_text())["traceEvents"]
        return profiling.kernel_table(events, calls=5, device="cuda")
    before, after = table("before"), table("after")
    assert before[0]["mean_ms"] == pytest.approx(after[0]["mean_ms"]) == pytest.approx(0.036)
    assert before[0]["per_call_ms"] == pytest.approx(0.030) and after[0]["per_call_ms"] == pytest.approx(0.033)
    assert before[0]["launches_per_call"] == 1.0
    found = diff.kernel_diff(before, after)
    assert found["rows"][0]["name"] == "_matmul_kernel" and found["rows"][0]["delta_ms"] == pytest.approx(0.003)
    assert found["rows"][0]["calls_before"] == 1.0 and found["headline"] == "`_matmul_kernel` +3 us of +3 us"


def test_profiled_calls_warm_up_then_fill_the_minimum_time(monkeypatch) -> None:
    monkeypatch.setattr(profiling, "WARMUP_S", 0.01)
    monkeypatch.setattr(profiling, "PROFILED_MIN_S", 1.0)  # 40 calls of an 8x8 product: far less, even loaded
    monkeypatch.setattr(profiling, "MAX_PROFILED_CALLS", 40)
    a = torch.randn(8, 8)
    calls = []
    assert profiling.profiled_calls(lambda: calls.append(a @ a), "cpu") == 40  # a cheap call: the cap
    assert len(calls) >= 1  # warmed up, unprofiled
    entry = profiling.profile_case(lambda: a @ a, "cpu")
    assert entry["calls"] == 40 and any(r["name"] == "aten::mm" and r["calls"] == 40 for r in entry["kernels"])
    big = torch.randn(384, 384)
    assert profiling.profiled_calls(lambda: big @ big @ big @ big, "cpu") >= profiling.PROFILED_CALLS

    def broken():
        raise RuntimeError("out of memory")
    failed = profiling.profile_case(broken, "cpu")
    assert failed["kernels"] == [] and failed["note"].startswith("the warm-up call failed: RuntimeError")


def test_kernel_table_on_cpu_takes_self_time() -> None:
    events = json.loads((DATA / "profiler" / "cpu_trace.json").read_text())["traceEvents"]
    rows = {r["name"]: r for r in profiling.kernel_table(events, calls=2, device="cpu")}
    assert rows["aten::addmm"]["total_ms"] == pytest.approx(0.170)  # 80 + 90 us: its copy_ is its own row
    assert rows["aten::linear"]["total_ms"] == pytest.approx(0.012)  # 100 - 4 - 90, twice
    assert rows["aten::copy_"]["calls"] == 1 and not any("functional.py" in name for name in rows)


def test_profile_case_on_cpu_and_a_failing_profiler(monkeypatch) -> None:
    a = torch.randn(64, 64)
    entry = profiling.profile_case(lambda: a @ a, "cpu", calls=3)
    assert entry["note"] is None and any(r["name"] == "aten::mm" and r["calls"] == 3 for r in entry["kernels"])

    def broken(*args, **kwargs):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
    monkeypatch.setattr(torch.profiler, "profile", broken)
    failed = profiling.profile_case(lambda: a @ a, "cpu")
    assert failed["kernels"] == [] and failed["note"].startswith("the profiler failed: RuntimeError: CUPTI")


def test_live_triton_without_triton_is_a_note(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delitem(__import__("sys").modules, "triton", raising=False)
    assert profiling.live_triton(tmp_path)["note"] == "Triton is not loaded in this trial"


def test_profiled_cpu_trial_has_kernels_and_no_samples(demo) -> None:
    case = {"suite": "gemm", "target": demo_pkg.GEMM_TARGET, "params": {"M": 128, "N": 128, "K": 128, "dtype": "fp32"}}
    result = run_harness({"cases": [case], "device": "cpu", "profile": True, "seed": 1},
                         demo.worktree(demo.shas[-1]), timeout_s=120)
    validate_result(result)
    (entry,) = result["cases"]
    assert entry["status"] == "ok" and entry["target_ms"] == [] and entry["median_ratio"] is None
    assert profiling.PROFILED_CALLS <= entry["profile"]["calls"] <= profiling.MAX_PROFILED_CALLS and entry["profile"]["kernels"]
    assert result["evidence"]["compiled"]["kernels"] == []  # the CPU compiles no Triton kernel
    assert "no Triton" in result["evidence"]["compiled"]["note"]


def test_the_stored_ttgir_is_bounded_over_all_kernels() -> None:
    kernels = [{"name": f"k{i}", "ttgir": "x" * 600} for i in range(3)]
    jitcache._within_budget(kernels, budget=1000)
    assert [len(k["ttgir"]) for k in kernels] == [600, 0, 0]
    assert "ttgir_truncated" not in kernels[0] and kernels[1]["ttgir_truncated"] and kernels[2]["ttgir_truncated"]


def test_live_kernel_facts_name_the_constexprs() -> None:
    from types import SimpleNamespace as NS
    src = NS(constants={(3,): 32, (4,): 8}, fn=NS(arg_names=["a", "b", "c", "BLOCK_K", "GROUP_M"]))
    kernel = NS(metadata=NS(name="matmul_kernel", hash="ab12"), src=src, n_regs=168, n_spills=0)
    assert profiling._kernel_facts(kernel) == {"name": "matmul_kernel", "hash": "ab12", "n_regs": 168, "n_spills": 0,
                                               "constants": {"BLOCK_K": 32, "GROUP_M": 8}}
    jit = NS(device_caches={0: ({"key": kernel}, "target", "backend", "binder")})
    tuner = NS(fn=NS(fn=jit), configs=[1, 2], cache={})
    assert profiling._compiled_of(profiling._jit_of(tuner)) == [kernel]


FLYDSL = DATA / "flydsl"


def test_flydsl_dumps_give_source_mlir_with_fastmath_llvm_ir_and_amdgcn_resources() -> None:
    (kernel,) = jitcache.read_flydsl(FLYDSL / "dump_before")
    assert kernel["name"] == "attn_fwd_kernel" and kernel["metadata"]["target"] == "rocm:gfx950"
    assert kernel["ir_levels"] == ["amdgcn", "fly", "llir"] and kernel["diff_ir"] == "fly"
    assert kernel["ops"]["fly"]["arith.mulf<fast>"] == 2 and kernel["ops"]["fly"]["math.exp2<fast>"] == 1
    assert kernel["ops"]["fly"]["fly.load"] == 1 and "gpu.module" in kernel["ops"]["fly"]
    assert kernel["ops"]["llir"]["call @llvm.exp2.v8f32"] == 1
    assert (kernel["metadata"]["n_regs"], kernel["metadata"]["occupancy"]) == (32, 8)
    assert kernel["ttgir"].startswith("#loc")  # the diffable text is the source MLIR
    (after,) = jitcache.read_flydsl(FLYDSL / "dump_after")
    assert after["ops"]["fly"]["arith.mulf"] == 2 and "math.exp2<fast>" not in after["ops"]["fly"]


class CompiledArtifact:
    """Pickles as FlyDSL's does (jit_executor.CompiledArtifact.__getstate__'s dict)."""

    def __init__(self, state):
        self.state = state

    def __getstate__(self):
        return self.state


class Gadget:
    def __reduce__(self):
        import os
        return (os.system, ("touch /tmp/perfbisect-pickle-ran",))


def test_a_flydsl_cache_pickle_is_read_without_running_it(tmp_path: Path) -> None:
    import pickle

    source = (FLYDSL / "dump_before" / "attn_fwd_kernel" / "00_origin.mlir").read_text()
    entry = tmp_path / "cache" / "attn_fwd_kernel_3f2a"
    entry.mkdir(parents=True)
    (entry / "0123456789abcdef.pkl").write_bytes(pickle.dumps(CompiledArtifact(
        {"ir_text": "module {}", "entry": "attn_fwd_kernel", "source_ir": source, "processor_refs": []})))
    (kernel,) = jitcache.read_flydsl(None, tmp_path / "cache")
    assert (kernel["name"], kernel["hash"], kernel["ir_levels"]) == ("attn_fwd_kernel", "0123456789abcdef", ["fly"])
    assert kernel["ops"]["fly"]["math.exp2<fast>"] == 1
    # a kernel with a dump is read from the dump (more levels), not from its pickle
    (dumped,) = jitcache.read_flydsl(FLYDSL / "dump_before", tmp_path / "cache")
    assert dumped["ir_levels"] == ["amdgcn", "fly", "llir"]
    # a repository's pickle is parsed, never executed (what it claims is only its own trial's
    # evidence, as a dump file it wrote would be); a broken one is no kernel
    marker = Path("/tmp/perfbisect-pickle-ran")
    marker.unlink(missing_ok=True)
    (entry / "fedcba9876543210.pkl").write_bytes(pickle.dumps({"entry": "evil", "source_ir": Gadget()}))
    (entry / "0000000000000000.pkl").write_bytes(b"\x80\x04garbage")
    assert [k["name"] for k in jitcache.read_flydsl(None, tmp_path / "cache")] == ["attn_fwd_kernel", "evil"]
    assert not marker.exists()
    assert jitcache.pickled_strings(pickle.dumps({"entry": "k", "source_ir": None})) == {"entry": "k"}


def test_a_profiled_trial_keeps_flydsl_ir_by_construction(monkeypatch, tmp_path: Path) -> None:
    from perfbisect.kernels.harness import trial

    env = jitcache.flydsl_dump_env(str(tmp_path))
    assert env == {"FLYDSL_DUMP_IR": "1", "FLYDSL_DUMP_DIR": str(tmp_path), "FLYDSL_RUNTIME_ENABLE_CACHE": "0"}
    monkeypatch.setenv("FLYDSL_DUMP_DIR", str(FLYDSL / "dump_after"))
    monkeypatch.delenv("FLYDSL_RUNTIME_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    compiled = trial.compiled_evidence(tmp_path)["compiled"]
    assert [k["name"] for k in compiled["kernels"]] == ["attn_fwd_kernel"] and compiled["note"] is None
