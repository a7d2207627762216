"""A job's outcome on the real PostgreSQL, through advance_job's rounds and the API: a target that
does not import, a missing device, a head that fails, a dtype alias, a noisy run, and a trial that
reports ok without the case asked for. Never "succeeded" for what was not measured."""

from __future__ import annotations

import random

import pytest

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.jobs import advance
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs import views
from perfbisect.service.jobs.schemas import BisectCreate, CompareCreate
from perfbisect.service.models import Trial
from perfbisect.service.trials import service as trials
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result, repo, run_job, submit  # noqa: F401

NO_CUDA = "device 'cuda' requested but torch sees no CUDA device"
IMPORT = "ModuleNotFoundError: No module named 'minikern.nope'"


def failing(status: str, error: str):
    def truth(i: int, rng: random.Random) -> dict:
        return {**harness_result({}, rng, status=status), "error": error}
    return truth


def test_a_target_that_does_not_import_fails_the_job_with_its_error(session, repo, client) -> None:
    job_id = submit(session)
    rounds = run_job(session, job_id, failing("import_error", IMPORT))
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "failed"
    assert job["error"] == (f"2 of 2 case(s) could not be measured; {CASE_BIG}: import failed at the good end; "
                            f"nothing built at any of the 6 revisions tried: check the target and the import root")
    # both ends and their two nearest neighbours, then the job stops: not every revision of the range
    assert rounds == 3 and job["progress"]["measured"] == job["progress"]["unbuildable"] == 6
    outcome = job["outcome"]
    assert outcome["verdict"] == "failed" and outcome["counts"]["failed"] == 2 and outcome["counts"]["unchanged"] == 0
    assert {c["error"] for c in outcome["cases"]} == {IMPORT}
    assert outcome["failures"][0]["reason"] == "import_error" and outcome["failures"][0]["words"] == "import failed"
    report = client.get(f"/api/jobs/{job_id}/report").text
    assert "No performance step" not in report and IMPORT in report


def test_a_build_broken_everywhere_ends_the_job_without_waiting_for_the_sweep(session, repo) -> None:
    # The sweep's trials are queued in round 1, one at every revision; workers that take the
    # search's trials first have not run them yet when the search gives up: they are cancelled,
    # not built one by one to fail alike.
    job_id = submit(session, check_accuracy=True)
    broken = failing("build_error", "sh: 1: nvcc: not found")
    for _ in range(10):
        trial_ids = advance.advance(session, job_id).trial_ids
        session.flush()
        timed = [t for t in trial_ids if not session.get(Trial, t).accuracy_only]
        if not timed:
            break
        for trial_id in timed:
            if trials.start(session, trial_id, worker_host="test") is not None:
                trials.record(session, trial_id, broken(0, random.Random(0)), build_s=0.0)
    job = views.job_read(session, jobs.get(session, job_id), logs=True)
    assert job.status == "failed" and "check the build command" in job.error
    sweep = session.query(Trial).filter_by(job_id=job_id, accuracy_only=True).all()
    assert len(sweep) == 17 - 2 and {t.status.value for t in sweep} == {"cancelled"}


def test_cuda_missing_is_named(session, repo) -> None:
    job_id = submit(session, device_class="cuda")
    rounds = run_job(session, job_id, failing("error", NO_CUDA))
    job = views.job_read(session, jobs.get(session, job_id), logs=True)
    assert job.status == "failed" and job.outcome.verdict == "failed"
    assert job.outcome.cases[0].reason == "CUDA missing at the good end" and job.outcome.cases[0].error == NO_CUDA
    # The worker's fault, the same at every revision: the job stops at its ends instead of
    # walking inward from them as from unbuildable revisions (on a CPU box a 45-revision range
    # ran 135 trials, 7 minutes, to say the same thing).
    assert rounds == 1 and job.progress["measured"] == 2 and job.progress["trials"] == 6


def test_cuda_missing_after_trials_ran_does_not_stop_the_job(session, repo) -> None:
    # One worker without a GPU among several is not every revision failing: once a trial ran,
    # a missing device is a failed revision like any other and the search goes on.
    job_id = submit(session, device_class="cuda")

    def truth(i: int, rng: random.Random) -> dict:
        return failing("error", NO_CUDA)(i, rng) if i == 8 else harness_result({CASE_BIG: 1.0, CASE_SMALL: 1.0}, rng)

    run_job(session, job_id, truth)
    job = views.job_read(session, jobs.get(session, job_id), logs=True)
    assert job.status == "succeeded" and job.outcome.verdict == "unchanged"


def test_a_compare_whose_head_fails_to_import_is_failed(session, repo) -> None:
    body = CompareCreate(repository="lib", base="HEAD~1", head="main", benchmarks=[
        {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}])
    job_id = jobs.submit_compare(session, body, SYSTEM).job.id

    def truth(i: int, rng: random.Random) -> dict:
        return harness_result({CASE_SMALL: 1.0}, rng) if i == 0 else failing("import_error", IMPORT)(i, rng)

    run_job(session, job_id, truth)
    job = views.job_read(session, jobs.get(session, job_id), logs=True)
    assert job.status == "failed"
    [case] = job.outcome.cases
    assert case.outcome == "failed" and case.reason == "import failed at the bad end"
    assert case.failed_at == job.revision_shas[1] and case.error == IMPORT


def test_unchanged_says_the_bound_it_ruled_out(session, repo, client) -> None:
    job_id = submit(session)
    run_job(session, job_id, lambda i, rng: harness_result({CASE_BIG: 1.0, CASE_SMALL: 1.0}, rng))
    job = views.job_read(session, jobs.get(session, job_id), logs=True)
    assert job.status == "succeeded" and job.outcome.verdict == "unchanged"
    assert all(c.outcome == "unchanged" and 0 < c.bound < 0.02 for c in job.outcome.cases)
    # issue 46: and what it covers, the widest stretch between measured revisions, in the API,
    # the text report and the job page (never "no step in this range" without it)
    shas = job.revision_shas  # HEAD~16..main: no scan points by default (16 commits)
    gap = client.get(f"/api/jobs/{job_id}").json()["outcome"]["gap"]
    assert (shas.index(gap["after_sha"]), shas.index(gap["before_sha"]), gap["commits"]) == (0, 16, 16)
    said = "a step undone within 16 consecutive commits"
    assert said in " ".join(client.get(f"/api/jobs/{job_id}/report").text.split())
    assert said in client.get(f"/dashboard/jobs/{job_id}").text


def test_a_noisy_run_is_inconclusive_with_the_smallest_step_it_could_see(session, repo) -> None:
    job_id = submit(session, max_trials=6)

    def truth(i: int, rng: random.Random) -> dict:
        return harness_result({CASE_BIG: rng.lognormvariate(0, 0.15), CASE_SMALL: rng.lognormvariate(0, 0.15)}, rng)

    run_job(session, job_id, truth)
    job = views.job_read(session, jobs.get(session, job_id), logs=True)
    assert job.status == "inconclusive" and job.outcome.verdict == "inconclusive"
    assert "could not be decided" in job.error
    assert job.outcome.warning.startswith("noisy run: the smallest step it could detect is")
    assert all(n.noisy and n.detectable > 0.2 for n in job.outcome.noise)


def test_an_ok_trial_without_the_requested_case_fails_loudly(session, repo) -> None:
    job_id = submit(session)

    def truth(i: int, rng: random.Random) -> dict:  # the harness names the small case differently
        result = harness_result({CASE_BIG: 1.0, CASE_SMALL.replace("fp32", "float32"): 1.0}, rng)
        return result

    run_job(session, job_id, truth)
    job = views.job_read(session, jobs.get(session, job_id), logs=True)
    assert job.status == "failed"
    [failure] = {f.reason for f in job.outcome.failures}
    assert failure == "no_measurement"
    assert f"no measurement stored for 1 requested case(s) ({CASE_SMALL})" in job.outcome.failures[0].error


@pytest.mark.parametrize("alias", ["bfloat16", "BF16", "torch.bfloat16", "bf16", None])
def test_dtype_aliases_are_stored_under_the_harness_name(session, repo, alias) -> None:
    shape = "M=64,N=64,K=64" + (f",dtype={alias}" if alias else "")
    body = BisectCreate(repository="lib", good="HEAD~2", bad="main", suite="gemm",
                        target="minikern.gemm:matmul", shapes=[shape, {"K": 32, "dtype": alias or "bf16", "M": 8, "N": 16}])
    job = jobs.create_bisect(session, body, SYSTEM)
    assert [c["name"] for c in job.spec.cases] == ["gemm M=64,N=64,K=64,dtype=bf16", "gemm M=8,N=16,K=32,dtype=bf16"]
    assert job.spec.cases[0]["params"] == {"M": 64, "N": 64, "K": 64, "dtype": "bf16"}


def test_attention_defaults_are_part_of_the_stored_name(session, repo) -> None:
    body = BisectCreate(repository="lib", good="HEAD~2", bad="main", suite="attention",
                        target="minikern.attention:attention", shapes=["S=128,D=64,H=1,B=1,dtype=Float16"])
    job = jobs.create_bisect(session, body, SYSTEM)
    assert job.spec.cases[0]["name"] == "attention B=1,H=1,S=128,D=64,causal=false,dtype=fp16"


def test_the_accuracy_sweep_finds_wrong_results_the_search_never_builds(session, repo) -> None:
    def truth(i: int, rng: random.Random) -> dict:
        return harness_result({CASE_BIG: 1.0, CASE_SMALL: 1.0}, rng, wrong=9 <= i <= 11)

    plain = submit(session)
    run_job(session, plain, truth)
    assert [c.kind for c in views.job_read(session, jobs.get(session, plain), logs=True).culprits] == []  # ends agree: done

    swept = submit(session, check_accuracy=True)
    run_job(session, swept, truth)
    job = views.job_read(session, jobs.get(session, swept), logs=True)
    [wrong] = job.culprits
    assert wrong.kind == "correctness"
    assert (job.revision_shas.index(wrong.first_sha), job.revision_shas.index(wrong.fixed_sha)) == (9, 12)
    assert job.status == "succeeded" and job.progress["accuracy_checked"] == 17 - 2  # the ends are timed
    timed = session.query(Trial).filter_by(job_id=swept, accuracy_only=False).all()
    # the sweep adds accuracy-only trials; the timed search still measured only the ends
    assert {t.revision_id for t in timed} == {t.revision_id for t in session.query(Trial).filter_by(job_id=plain)}


def test_the_job_page_shows_each_case_outcome_and_the_failure_kind(session, repo, client) -> None:
    job_id = submit(session)
    run_job(session, job_id, failing("import_error", IMPORT))
    html = client.get(f"/dashboard/jobs/{job_id}").text
    assert "<h2>Outcome: failed</h2>" in html and "import failed at the good end" in html
    assert "ModuleNotFoundError" not in html  # the page is public: the failure's kind, not the log's text
    assert "No performance step" not in html


def test_a_dtype_alias_through_the_api_is_stored_under_the_harness_name(session, repo, client, sent_tasks) -> None:
    body = {"repository": "lib", "good": "HEAD~2", "bad": "main", "suite": "gemm", "target": "minikern.gemm:matmul",
            "shapes": ["K=64,M=64,N=64,dtype=BF16", "M=32,N=32,K=32"]}
    accepted = client.post("/api/jobs/bisect", json=body)
    assert accepted.status_code == 202, accepted.text
    job = client.get(accepted.json()["url"]).json()
    assert [c["name"] for c in job["spec"]["cases"]] == ["gemm M=64,N=64,K=64,dtype=bf16", "gemm M=32,N=32,K=32,dtype=bf16"]
    bad = client.post("/api/jobs/bisect", json={**body, "shapes": ["M=1,N=1,K=1,dtype=int3"]})
    assert bad.status_code == 422 and "unknown dtype 'int3'" in bad.text


def test_a_target_far_slower_than_its_control_is_warned_about_from_the_stored_trials(session, repo) -> None:
    """Issue 28: the call times come from each stored measurement's control/target ratio."""
    job_id = submit(session)
    run_job(session, job_id, lambda i, rng: harness_result({CASE_BIG: 0.04, CASE_SMALL: 1.0}, rng))
    outcome = views.job_read(session, jobs.get(session, job_id), logs=True).outcome
    assert outcome.verdict == "unchanged"
    assert outcome.warning.startswith(f"a target call takes 25x a control call on {CASE_BIG}: the control cancels")
