"""Suite files kept outside the repository: sent in the request (size-limited, compiled, never
run by the service), stored once by sha256 and shown with the job; named benchmark sets of a
repository; the worker ships the file to the harness, which applies it to a revision that has
no such file."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

from sqlalchemy import select

from perfbisect.kernels.harness.launch import stop_servers
from perfbisect.service.suites.schemas import MAX_SUITE_SOURCE_BYTES
from perfbisect.service.models import Job, SuiteSource, Trial
from perfbisect.service.settings import get_settings
from perfbisect.service.trials import service as trials
from tests.gitrepo import git
from tests.kernels.conftest import CUSTOM_SUITE, write_files
from tests.kernels.test_launch import POLICY, PROBE
from tests.test_api import bisect_body, registered, repo_path  # noqa: F401  (fixtures)
from perfbisect.workers.runner import execute

SUITE = textwrap.dedent(CUSTOM_SUITE)
SHA = hashlib.sha256(SUITE.encode()).hexdigest()
SOURCE_BENCH = {"suite": "tanh_bwd.py", "suite_source": SUITE, "target": "probekern.ops:probe", "shapes": ["N=1024"]}


def test_a_suite_source_is_stored_by_hash_and_shown_with_the_job(client, session, registered) -> None:
    response = client.post("/api/jobs/bisect", json=bisect_body(suite=None, target=None, shapes=None,
                                                                benchmarks=[SOURCE_BENCH]))
    assert response.status_code == 202, response.text
    job = client.get(response.json()["url"]).json()
    suite = f"source:tanh_bwd.py@{SHA[:12]}"
    assert job["spec"]["suite_sources"] == [{"suite": suite, "sha256": SHA, "bytes": len(SUITE.encode())}]
    assert [(c["suite"], c["source"], c["name"]) for c in job["spec"]["cases"]] == [(suite, SHA, f"{suite} N=1024")]
    assert session.get(SuiteSource, SHA).content == SUITE
    page = client.get(f"/dashboard/jobs/{job['id']}")
    assert page.status_code == 200 and f'href="/api/suite-sources/{SHA}"' in page.text
    text = client.get(f"/api/suite-sources/{SHA}")
    assert text.status_code == 200 and text.text == SUITE
    assert client.get(f"/api/suite-sources/{'0' * 64}").status_code == 404
    # the same content again is one row, and the worker gets it with the trial
    again = client.post("/api/jobs/compare", json={"repository": "lib", "base": "HEAD~1", "head": "main",
                                                    "benchmarks": [SOURCE_BENCH]})
    assert again.status_code == 202, again.text
    assert len(session.scalars(select(SuiteSource)).all()) == 1
    trial = Trial(job_id=job["id"], revision_id=_revision_id(session, job["revision_shas"][0]))
    session.add(trial)
    session.flush()
    assert trials.start(session, trial.id).suite_sources == {SHA: SUITE}


def _revision_id(session, sha: str) -> int:
    from perfbisect.service.models import Revision

    return session.scalars(select(Revision.id).where(Revision.sha == sha)).one()


def test_bad_suite_sources_are_422_with_a_message(client, session, registered) -> None:
    def submit(**bench) -> tuple[int, str]:
        response = client.post("/api/jobs/bisect", json=bisect_body(
            suite=None, target=None, shapes=None, benchmarks=[{**SOURCE_BENCH, **bench}]))
        return response.status_code, response.text

    jobs_before = len(session.scalars(select(Job)).all())
    code, text = submit(suite_source="x = 1\n" + "#" * MAX_SUITE_SOURCE_BYTES)
    assert code == 422 and f"over the limit of {MAX_SUITE_SOURCE_BYTES}" in text
    code, text = submit(suite_source="def broken(:\n")
    assert code == 422 and "is not valid Python" in text
    code, text = submit(suite="../etc/passwd")
    assert code == 422 and "file name label" in text
    assert len(session.scalars(select(Job)).all()) == jobs_before
    assert session.scalars(select(SuiteSource)).all() == []


def test_only_an_admin_sends_suite_code_a_submitter_uses_registered_sets(client, submit_client, session,
                                                                         registered) -> None:
    sent = submit_client.post("/api/jobs/bisect", json=bisect_body(suite=None, target=None, shapes=None,
                                                                   benchmarks=[SOURCE_BENCH]))
    assert sent.status_code == 403 and "needs the admin scope" in sent.text
    assert session.scalars(select(SuiteSource)).all() == []
    made = client.post("/api/repositories/lib/benchmark-sets", json={"name": "tanh", "benchmarks": [SOURCE_BENCH]})
    assert made.status_code == 201, made.text
    named = submit_client.post("/api/jobs/compare", json={"repository": "lib", "base": "HEAD~1", "head": "main",
                                                          "benchmark_set": "tanh"})
    assert named.status_code == 202, named.text


def test_a_benchmark_set_gives_a_job_its_cases(client, registered, submit_client) -> None:
    body = {"name": "tanh", "benchmarks": [SOURCE_BENCH, {"suite": "gemm", "target": "minikern.gemm:matmul",
                                                          "shapes": ["M=64,N=64,K=64,dtype=fp32"]}]}
    assert submit_client.post("/api/repositories/lib/benchmark-sets", json=body).status_code == 403
    created = client.post("/api/repositories/lib/benchmark-sets", json=body)
    assert created.status_code == 201, created.text
    assert [c["name"] for c in created.json()["cases"]] == [f"source:tanh_bwd.py@{SHA[:12]} N=1024",
                                                            "gemm M=64,N=64,K=64,dtype=fp32"]
    assert created.json()["sources"][0]["sha256"] == SHA
    assert [s["name"] for s in client.get("/api/repositories/lib/benchmark-sets").json()] == ["tanh"]
    replaced = client.post("/api/repositories/lib/benchmark-sets", json={**body, "benchmarks": body["benchmarks"][1:]})
    assert replaced.status_code == 201 and len(replaced.json()["cases"]) == 1
    created = client.post("/api/repositories/lib/benchmark-sets", json=body)
    response = client.post("/api/jobs/bisect", json=bisect_body(suite=None, target=None, shapes=None,
                                                                benchmark_set="tanh"))
    assert response.status_code == 202, response.text
    job = client.get(response.json()["url"]).json()
    assert job["spec"]["cases"] == created.json()["cases"]
    missing = client.post("/api/jobs/bisect", json=bisect_body(suite=None, target=None, shapes=None,
                                                               benchmark_set="nope"))
    assert missing.status_code == 404 and "no benchmark set 'nope'" in missing.text
    both = client.post("/api/jobs/bisect", json=bisect_body(benchmark_set="tanh"))
    assert both.status_code == 422 and "not several" in both.text


def test_the_worker_applies_the_sent_suite_to_a_revision_without_it(tmp_path: Path, monkeypatch) -> None:
    # the probe writes to this test's directory, which a trial in namespaces cannot see
    monkeypatch.setattr(get_settings(), "sandbox_namespaces", "off")
    """The repository has no suite file at all: the harness imports the one sent with the job
    from the trial's directory, with the revision's import root (src/) on sys.path."""
    root = write_files(tmp_path / "repo", {"src/probekern/__init__.py": "", "src/probekern/ops.py": PROBE})
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "probe")
    out = tmp_path / "probe.json"
    suite = f"source:tanh_bwd.py@{SHA[:12]}"
    work = trials.TrialWork(
        trial_id=1, job_id=1, repo_name="probe-src", repo_url=str(root), build_command=None, import_root="src",
        env={"PROBE_OUT": str(out)}, sha=git(root, "rev-parse", "HEAD"), device_class="cpu", policy=POLICY,
        cases=[{"suite": suite, "source": SHA, "target": "probekern.ops:probe", "params": {"N": 1024}}],
        suite_sources={SHA: SUITE})
    try:
        result, _ = execute(work)
    finally:
        stop_servers()
    assert result["status"] == "ok", result
    assert result["cases"][0]["name"] == f"{suite} N=1024" and result["cases"][0]["metric"]["name"] == "GB/s"
    assert not (Path(json.loads(out.read_text())["cwd"]) / "bench").exists()


def test_stored_cases_resolve_again_to_the_same_cases(session) -> None:
    """Alert bisects and the PR bot rebuild benchmarks from stored cases: a suite file's text is
    read back by its hash, so the new job measures the very same cases."""
    from perfbisect.service.suites.schemas import Benchmark
    from perfbisect.service.suites import service as suites

    benchmarks = [Benchmark(**SOURCE_BENCH), Benchmark(suite="gemm", target="m.k:f", shapes=["M=64,N=64,K=64"])]
    cases = suites.resolve_cases(benchmarks)
    suites.store_sources(session, benchmarks)
    assert suites.resolve_cases(suites.benchmarks_of_cases(session, cases)) == cases
