"""A culprit's evidence (issue 43): the pure diffs on recorded profiler tables and recorded Triton
cache contents, the profiled trials a job with evidence runs at each culprit's ends (never in the
timing statistics), the API and the report's 'why' block, and every failure path as a reason."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sqlalchemy import select

from perfbisect.kernels.harness import jitcache
from perfbisect.service.alerts.render import why_line
from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.evidence import diff
from perfbisect.service.evidence.repository import profiled_trials as profiled_trials_of
from perfbisect.service.evidence.service import evidence_of
from perfbisect.service.jobs import advance, views
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate, CompareCreate
from perfbisect.service.alerts import bot
from perfbisect.service.models import (CulpritKind, Job, JobStatus, Measurement, Revision, TrackedBranch, Trial,
                                       TrialStatus)
from perfbisect.service.reports.culprits import culprit_table
from perfbisect.service.reports.pr_comment import render_job
from perfbisect.service.trials import service as trials
from perfbisect.service.trials.service import profiled_evidence
from tests.alerts.test_alert_bot import CULPRIT, FakeGitHub, _bisected, alert, token  # noqa: F401 (fixtures)
from tests.factories import create_repository
from tests.gitrepo import make_repo
from tests.test_job_rounds import harness_result

DATA = Path(__file__).resolve().parent / "data"
CASE = "gemm M=256,N=256,K=256,dtype=fp32"
STEP_AT = 9  # revisions 9.. are 20% slower

BEFORE_TABLE = [
    {"name": "_layer_norm_bwd_kernel", "calls": 5, "total_ms": 1.0, "mean_ms": 0.2, "per_call_ms": 0.2,
     "grid": [8192, 1, 1], "block": [128, 1, 1]},
    {"name": "_layer_norm_bwd_dwdb", "calls": 5, "total_ms": 0.5, "mean_ms": 0.1, "per_call_ms": 0.1,
     "grid": [132, 1, 1], "block": [128, 1, 1]},
]
AFTER_TABLE = [
    {"name": "_layer_norm_bwd_kernel", "calls": 5, "total_ms": 16.5, "mean_ms": 3.3, "per_call_ms": 3.3,
     "grid": [8192, 1, 1], "block": [64, 1, 1]},
    {"name": "_layer_norm_bwd_dwdb", "calls": 5, "total_ms": 1.0, "mean_ms": 0.2, "per_call_ms": 0.2,
     "grid": [132, 1, 1], "block": [128, 1, 1]},
    {"name": "Memset (Device)", "calls": 5, "total_ms": 0.05, "mean_ms": 0.01, "per_call_ms": 0.01,
     "grid": None, "block": None},
]


def live(block_k: int, hash_: str) -> dict:
    return {"autotune": [{"kernel": "softmax_kernel", "configs": 4, "chosen": {
                "(1024, torch.float32)": {"kwargs": {"BLOCK_K": block_k}, "num_warps": 4, "num_stages": 3}}}],
            "kernels": [{"name": "softmax_kernel", "hash": hash_, "n_regs": 40 if block_k == 64 else 96,
                         "n_spills": 0, "constants": {"BLOCK_K": block_k}}],
            "note": None}


def profiled(cache: str, table: list[dict], block_k: int) -> dict:
    compiled = jitcache.read_cache(DATA / "triton_cache" / cache)
    return {"compiled": compiled, "live": live(block_k, compiled["kernels"][0]["hash"]),
            "table": table}


def test_kernel_diff_ranks_by_absolute_change_and_names_the_carrier() -> None:
    found = diff.kernel_diff(BEFORE_TABLE, AFTER_TABLE)
    assert [r["name"] for r in found["rows"]] == ["_layer_norm_bwd_kernel", "_layer_norm_bwd_dwdb", "Memset (Device)"]
    top = found["rows"][0]
    assert top["delta_ms"] == pytest.approx(3.1) and top["block_before"] == [128, 1, 1] and top["block_after"] == [64, 1, 1]
    assert found["rows"][2]["status"] == "added"
    assert found["total_delta_ms"] == pytest.approx(3.21)
    assert found["headline"] == "`_layer_norm_bwd_kernel` +3.1 ms of +3.21 ms"


def test_compiled_diff_of_recorded_nvidia_caches() -> None:
    before, after = profiled("nvidia_before", [], 64), profiled("nvidia_after", [], 32)
    found = diff.compiled_diff(before["compiled"], after["compiled"], before["live"], after["live"])
    (kernel,) = found["kernels"]
    assert found["available"] and kernel["status"] == "changed"
    changes = {c["field"]: (c["before"], c["after"]) for c in kernel["metadata"]}
    assert changes["num_stages"] == (3, 4) and changes["shared"] == (0, 16)
    assert changes["n_regs"] == (40, 96) and changes["constants"] == ({"BLOCK_K": 64}, {"BLOCK_K": 32})
    assert "num_warps" not in changes and "hash" not in changes
    ptx = {d["op"]: d["delta"] for d in kernel["ops"]["ptx"]}
    assert ptx["ex2.approx.f32"] == -2 and ptx["ex2.approx.ftz.f32"] == 2 and ptx["fma.rn.f32"] == 6
    assert {d["op"]: d["delta"] for d in kernel["ops"]["ttgir"]} == {"math.exp2": -1, "math.exp": 1}
    assert "ttir" not in kernel["ops"]  # the TTIR is the same at both ends
    assert "-    %10 = math.exp2" in kernel["ttgir_diff"] and "+    %10 = math.exp " in kernel["ttgir_diff"]


def test_compiled_diff_of_flydsl_dumps_shows_the_dropped_fastmath() -> None:
    """FlyDSL's IR as its dumps lay it out (tests/data/flydsl): the motivating case's #930, fastmath
    flags that stop reaching the builder, seen in the source MLIR, the LLVM IR and the ISA."""
    before, after = (jitcache.read_flydsl(DATA / "flydsl" / side) for side in ("dump_before", "dump_after"))
    found = diff.compiled_diff({"kernels": before}, {"kernels": after})
    (kernel,) = found["kernels"]
    assert found["available"] and found["reason"] is None and kernel["status"] == "changed"
    assert {d["op"]: d["delta"] for d in kernel["ops"]["fly"]} == {
        "arith.mulf<fast>": -2, "arith.mulf": 2, "math.exp2<fast>": -1, "math.exp2": 1, "arith.addf<fast>": -1, "arith.addf": 1}
    assert {d["op"]: d["delta"] for d in kernel["ops"]["amdgcn"]}["v_ldexp_f32"] == 1
    assert {c["field"]: (c["before"], c["after"]) for c in kernel["metadata"]}["n_regs"] == (32, 36)
    assert kernel["diff_ir"] == "fly" and "after/attn_fwd_kernel.fly" in kernel["ttgir_diff"]
    assert "-      %5 = math.exp2 %4 fastmath<fast>" in kernel["ttgir_diff"]


def test_bounded_unified_diff_is_cut() -> None:
    text, cut = diff.bounded_unified_diff("\n".join(map(str, range(2000))), "\n".join(f"x{i}" for i in range(2000)), "k")
    assert cut and len(text.splitlines()) == diff.MAX_DIFF_LINES
    assert diff.bounded_unified_diff("same", "same", "k") == (None, False)


def test_autotune_flip_and_environment_diff() -> None:
    flip = diff.autotune_diff(live(64, "a"), live(32, "b"))
    assert flip["flipped"] and flip["choices"][0]["before"]["kwargs"] == {"BLOCK_K": 64}
    assert not diff.autotune_diff(live(64, "a"), live(64, "b"))["flipped"]
    none = diff.autotune_diff({"autotune": []}, None)
    assert not none["available"] and "no kernel was autotuned" in none["reason"]
    env = diff.environment_diff({"name": "H100", "triton": "3.3.1", "torch": "2.7"},
                                {"name": "H100", "triton": "3.4.0", "torch": "2.7"})
    assert env["differences"] == [{"field": "triton", "before": "3.3.1", "after": "3.4.0"}] and not env["same"]


def test_no_triton_kernel_and_no_ir_files_are_reasons() -> None:
    cpu = jitcache.read_cache(DATA / "triton_cache" / "absent")
    found = diff.compiled_diff(cpu, cpu)
    assert not found["available"] and found["reason"] == "no Triton JIT cache directory for this trial"
    no_ir = jitcache.read_cache(DATA / "triton_cache" / "no_ir")
    partial = diff.compiled_diff(no_ir, no_ir)
    assert partial["available"] and "no IR files" in partial["reason"] and partial["kernels"][0]["status"] == "same"


# -- the job: profiled trials at each end, the API, the report ----------------------------------------------


@pytest.fixture
def repo(session, tmp_path: Path):
    path = tmp_path / "lib"
    make_repo(path, [f"change {i} (#{100 + i})" for i in range(17)])
    return create_repository(session, path, name="lib")


def profile_result(index: int, *, fail_profiler: bool = False, status: str = "ok") -> dict:
    """What the harness returns for a profiled trial: per case the table, then the compiled code."""
    end = profiled("nvidia_after", AFTER_TABLE, 32) if index >= STEP_AT else profiled("nvidia_before", BEFORE_TABLE, 64)
    params = {"M": 256, "N": 256, "K": 256, "dtype": "fp32"}
    profile = ({"kernels": [], "calls": 5, "note": "the profiler failed: RuntimeError: CUPTI"} if fail_profiler
               else {"kernels": end["table"], "calls": 5, "note": None})
    case = {"suite": "gemm", "target": "minikern.gemm:matmul", "params": params, "name": CASE, "status": "ok",
            "error": None, "target_ms": [], "control_ms": [], "ratio": [], "median_ratio": None,
            "metric": {"name": "GFLOP/s", "higher_is_better": True, "target": None, "control": None},
            "profile": profile}
    return {"status": status, "error": None if status == "ok" else "ImportError: boom",
            "cases": [case] if status == "ok" else [], "harness_version": "1", "wall_s": 0.1,
            "device": {"name": "test-gpu", "torch": "2.13", "triton": "3.3.1"},
            "evidence": {"compiled": end["compiled"], "live": end["live"]}}


def run(session, job_id: int, **profile_kw) -> list[list[int]]:
    """Drive advance -> start -> record like the tasks do; the rounds' trial ids."""
    rng, job, rounds = random.Random(3), jobs.get(session, job_id), []
    for _ in range(60):
        ids = advance.advance(session, job_id).trial_ids
        session.flush()
        if not ids:
            return rounds
        rounds.append(ids)
        for trial_id in ids:
            work = trials.start(session, trial_id, worker_host="test")
            index = job.revision_shas.index(work.sha)
            result = (profile_result(index, **profile_kw) if work.profile
                      else harness_result({CASE: 0.8 if index >= STEP_AT else 1.0}, rng))
            trials.record(session, trial_id, result, build_s=0.0)
    raise AssertionError("job did not finish")


def submit(session, evidence: bool = True) -> int:
    body = BisectCreate(repository="lib", good="HEAD~16", bad="main", evidence=evidence,
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32"]}])
    return jobs.create_bisect(session, body, SYSTEM).id


def test_a_job_with_evidence_profiles_each_end_once_after_the_culprit(session, repo, client) -> None:
    job_id = submit(session)
    rounds = run(session, job_id)
    job = jobs.get(session, job_id)
    assert job.status == JobStatus.succeeded
    (culprit,) = job.culprits
    assert culprit.first_sha == job.revision_shas[STEP_AT]
    profiled_trials = profiled_trials_of(session, job_id)
    assert sorted(t.id for t in profiled_trials) == sorted(rounds[-1])  # the last round, after the search
    assert {t.revision.sha for t in profiled_trials} == {job.revision_shas[STEP_AT - 1], culprit.last_sha}
    measured = session.scalars(select(Measurement.trial_id)).all()
    assert not set(measured) & {t.id for t in profiled_trials}  # never a measurement, never a statistic
    assert job.progress["trials"] == sum(len(r) for r in rounds[:-1])

    evidence = evidence_of(session, job_id, culprit.last_sha[:10])
    assert evidence.before_sha == job.revision_shas[STEP_AT - 1] and evidence.after_sha == culprit.last_sha
    assert evidence.kernels.cases[0].headline == "`_layer_norm_bwd_kernel` +3.1 ms of +3.21 ms"
    assert evidence.compiled.kernels[0].metadata[0].field == "num_stages"
    assert evidence.autotune.flipped and evidence.environment.same
    assert not evidence.hunks.available and evidence.hunks.reason  # helper D's part, when merged
    assert "kernel (gemm M=256,N=256,K=256,dtype=fp32): `_layer_norm_bwd_kernel` +3.1 ms of +3.21 ms per call" \
        in evidence.summary
    assert any(line.startswith("compiled: softmax_kernel: num_stages 3->4, shared 0->16") for line in evidence.summary)
    assert why_line(evidence.summary).startswith("kernel (gemm")

    response = client.get(f"/api/jobs/{job_id}/culprits/{culprit.last_sha}/evidence")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kernels"]["cases"][0]["rows"][0]["name"] == "_layer_norm_bwd_kernel"
    assert body["compiled"]["kernels"][0]["ttgir_diff"].startswith("--- before/softmax_kernel.ttgir")
    assert {d["op"] for d in body["compiled"]["kernels"][0]["ops"]["ptx"]} >= {"ex2.approx.f32", "ex2.approx.ftz.f32"}
    assert client.get(f"/api/jobs/{job_id}/culprits/{'0' * 40}/evidence").status_code == 404
    assert client.get(f"/api/jobs/{job_id}/culprits/nothex!/evidence").status_code == 422

    read = views.job_read(session, job)
    assert read.culprits[0].evidence_url == f"/api/jobs/{job_id}/culprits/{culprit.last_sha}/evidence"
    text = culprit_table(read)
    assert "  why:" in text and max(len(line) for line in text.splitlines()) <= 100
    flat = " ".join(text.split())  # the why lines wrap at the report's width
    assert "`_layer_norm_bwd_kernel` +3.1 ms of +3.21 ms per call" in flat
    assert "autotuner: the step comes with a flipped configuration: softmax_kernel chose {kwargs={'BLOCK_K': 64}" in flat
    comment = render_job(read, public_url="https://perf.example")
    assert (f"**Why** (`{culprit.last_sha[:10]}`): kernel (gemm M=256,N=256,K=256,dtype=fp32): "
            "`_layer_norm_bwd_kernel` +3.1 ms of +3.21 ms per call; compiled: softmax_kernel: num_stages 3->4") in comment
    assert f"[evidence](https://perf.example/dashboard/jobs/{job_id}#evidence-{culprit.last_sha[:12]})" in comment

    page = client.get(f"/dashboard/jobs/{job_id}")
    assert page.status_code == 200
    html = page.text
    assert f'<section id="evidence-{culprit.last_sha[:12]}"' in html
    assert "<code>_layer_norm_bwd_kernel</code>" in html and "+3.1" in html  # the kernel table
    assert "<td>num_stages</td><td>3</td><td>4</td>" in html  # the metadata table
    assert "<code>ex2.approx.f32</code></td><td class=\"num\">4</td><td class=\"num\">2</td>" in html  # op counts
    assert "<details><summary>TTGIR diff</summary>" in html  # the IR diff, collapsed


def test_a_job_without_evidence_runs_no_profiled_trial_and_says_why(session, repo) -> None:
    job_id = submit(session, evidence=False)
    run(session, job_id)
    job = jobs.get(session, job_id)
    assert not profiled_trials_of(session, job_id)
    found = evidence_of(session, job_id, job.culprits[0].last_sha)
    assert not found.kernels.available and "without evidence" in found.kernels.reason
    assert "no kernel evidence, because the job ran without evidence" in found.summary[0]
    assert views.job_read(session, job).culprits[0].why == []  # the report stays as it was


def test_a_profiler_that_failed_and_a_profiled_trial_that_failed_are_reasons(session, repo) -> None:
    job_id = submit(session)
    run(session, job_id, fail_profiler=True)
    job = jobs.get(session, job_id)
    assert job.status == JobStatus.succeeded
    found = evidence_of(session, job_id, job.culprits[0].last_sha)
    assert not found.kernels.available and "the profiler failed: RuntimeError: CUPTI" in found.kernels.reason
    assert found.compiled.available  # the compiled code is still there

    failed_id = submit(session)
    session.flush()
    run(session, failed_id, status="import_error")
    failed = jobs.get(session, failed_id)
    assert failed.status == JobStatus.succeeded  # never a failed job
    found = evidence_of(session, failed_id, failed.culprits[0].last_sha)
    assert "failed (import_error;" in found.kernels.reason and "failed (import_error;" in found.compiled.reason


def test_recorded_tables_stay_json(session) -> None:
    assert json.loads(json.dumps(profile_result(STEP_AT)))["evidence"]["compiled"]["kernels"][0]["name"] == "softmax_kernel"


def test_the_alert_comment_and_the_alert_page_carry_one_why_line(session, token, alert, monkeypatch, client) -> None:
    monkeypatch.setattr(token, "public_url", "https://perf.example/")
    _bisected(session, alert, CulpritKind.performance, {CASE: {
        "rel": -0.2, "ci": [-0.22, -0.18], "before": 1.0, "after": 0.8, "unit": "TFLOP/s"}})
    job = session.get(Job, alert.bisect_job_id)
    job.spec = job.spec.updated(evidence=True)
    tracked = session.get(TrackedBranch, alert.tracked_branch_id)
    parent = Revision(repository_id=tracked.repository_id, sha="a" * 40, subject="before")
    session.add(parent)
    session.flush()
    culprit_rev = session.scalars(select(Revision).where(Revision.sha == CULPRIT)).one()
    for revision, index in ((parent, STEP_AT - 1), (culprit_rev, STEP_AT)):
        session.add(Trial(job_id=job.id, revision_id=revision.id, profile=True, status=TrialStatus.ok,
                          evidence=profiled_evidence(profile_result(index))))
    session.flush()

    body = bot.post(bot.comment_work(session, alert.id), client=FakeGitHub().client())["comments"][0]["body"]
    assert (f"**Why** (`{CULPRIT[:10]}`): kernel ({CASE}): `_layer_norm_bwd_kernel` +3.1 ms of +3.21 ms per call; "
            "compiled: softmax_kernel: num_stages 3->4") in body
    assert f"[evidence](https://perf.example/dashboard/jobs/{job.id}#evidence-{CULPRIT[:12]})" in body
    page = client.get(f"/dashboard/alerts/{alert.id}").text
    assert f"<dt>why</dt><dd>kernel ({CASE}): `_layer_norm_bwd_kernel` +3.1 ms" in page
    assert f'<a href="/dashboard/jobs/{job.id}#evidence-{CULPRIT[:12]}">evidence</a>' in page


def test_evidence_is_stored_in_the_spec_only_when_asked_for() -> None:
    shapes = [{"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}]
    asked = BisectCreate(repository="lib", good="a", bad="b", benchmarks=shapes, evidence=True).to_spec([], 12)
    assert asked.evidence and asked.stored()["evidence"] is True
    plain = BisectCreate(repository="lib", good="a", bad="b", benchmarks=shapes).to_spec([], 12)
    assert not plain.evidence and "evidence" not in plain.stored()
    compare = CompareCreate(repository="lib", base="a", head="b", benchmarks=shapes, evidence=True).to_spec([], 12)
    assert compare.evidence and compare.stored()["evidence"] is True


def test_the_kernel_tables_are_those_of_the_cases_that_moved() -> None:
    from types import SimpleNamespace as NS

    from perfbisect.service.evidence.service import moved_cases

    job = NS(spec=NS(min_effect=0.05))
    moved = {"rel": -0.3, "ci": [-0.35, -0.25]}
    still = {"rel": -0.01, "ci": [-0.03, 0.01]}
    unconfirmed = {**moved, "confirmed": False}
    assert moved_cases(job, NS(effects={"a": still, "b": moved, "c": unconfirmed})) == ["b"]
    assert moved_cases(job, NS(effects={"a": still, "c": unconfirmed})) == ["a", "c"]  # none moved: all shown
