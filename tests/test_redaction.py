"""Redaction by value (issue 22): a repository `env` value that the API shows as '***' never
appears in clear in what a job shows: its outcome and error (GET /api/jobs/{id}), both reports,
the job page and the trials, even when the build prints it under no name at all. A real build
fails through the worker's path (a sandbox slot, the build command, the harness result) and the
service stores and shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbisect.service.jobs import advance
from perfbisect.service.models import Trial
from perfbisect.service.repos.redaction import REDACTED, env_secrets, scrub
from perfbisect.service.trials import service as trials
from perfbisect.workers.runner import execute
from tests.gitrepo import git

SECRET = "s3cr3t-deploy-key-7f3a9c"
# The value printed bare, in a URL and next to other text, on stdout and stderr.
LEAKY_BUILD = ('echo "deploying with $DEPLOY_KEY"; echo "https://ci:$DEPLOY_KEY@example.com/x" >&2; '
               'printf "%s" "$DEPLOY_KEY" | rev | rev; echo; exit 7')


@pytest.fixture
def leaky_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    root = tmp_path / "leaky"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = []
    for i in range(2):
        (root / "lib.py").write_text(f"SPEED = {i}\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"change {i}")
        shas.append(git(root, "rev-parse", "HEAD"))
    return root, shas


def failed_compare(session, registrar, submitter, root: Path, shas: list[str], build: str, env: dict) -> int:
    """Register `root` as "leaky" with `build` and `env` (`registrar`: an admin's client), have
    `submitter` compare its two commits, run the job to its end; returns the job's id."""
    created = registrar.post("/api/repositories", json={"name": "leaky", "url": str(root), "build_command": build,
                                                        "env": env})
    assert created.status_code == 201, created.text
    submitted = submitter.post("/api/jobs/compare", json={
        "repository": "leaky", "base": shas[0], "head": shas[1],
        "benchmarks": [{"suite": "gemm", "target": "lib:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}]})
    assert submitted.status_code == 202, submitted.text
    run_to_the_end(session, submitted.json()["id"])
    return submitted.json()["id"]


def run_to_the_end(session, job_id: int) -> None:
    """The job's rounds with every trial run by the worker's own code (execute) and stored."""
    for _ in range(10):
        trial_ids = advance.advance(session, job_id).trial_ids
        session.flush()
        if not trial_ids:
            return
        for trial_id in trial_ids:
            work = trials.start(session, trial_id, worker_host="test")
            if work is not None:
                result, build_s = execute(work)
                trials.record(session, trial_id, result, build_s=build_s, attempt=work.attempt)
    raise AssertionError("the job did not finish in 10 rounds")


def test_a_repository_env_value_printed_by_a_failing_build_is_shown_nowhere(
        session, client, anonymous_client, leaky_repo) -> None:
    job_id = failed_compare(session, client, client, *leaky_repo, LEAKY_BUILD, {"DEPLOY_KEY": SECRET, "SHORT": "1"})
    assert anonymous_client.get("/api/repositories/leaky").json()["env"] == {"DEPLOY_KEY": "***", "SHORT": "***"}

    job = client.get(f"/api/jobs/{job_id}")  # an admin sees the build's output, not the value
    assert job.json()["status"] == "failed", job.text
    failures = job.json()["outcome"]["failures"]
    assert failures and all("build command exited 7" in f["error"] for f in failures), failures
    assert "deploying with [redacted]" in job.text
    shown = {
        "job": job.text,
        "public job": anonymous_client.get(f"/api/jobs/{job_id}").text,
        "report": anonymous_client.get(f"/api/jobs/{job_id}/report").text,
        "markdown": anonymous_client.get(f"/api/jobs/{job_id}/report?format=markdown").text,
        "page": anonymous_client.get(f"/dashboard/jobs/{job_id}").text,
        "trials": client.get(f"/api/jobs/{job_id}/trials").text,  # an admin sees the logs, redacted
        "list": anonymous_client.get("/api/jobs").text,
    }
    for name, text in shown.items():
        assert SECRET not in text and SECRET[::-1] not in text, name
    assert REDACTED in shown["trials"] and "build failed: exit 7" in shown["report"]
    stored = session.query(Trial).filter_by(job_id=job_id).all()
    assert stored and all(SECRET not in (t.failure_reason or "") for t in stored)


def test_rows_stored_before_redaction_are_scrubbed_when_shown(session, client, anonymous_client, leaky_repo) -> None:
    job_id = failed_compare(session, client, client, *leaky_repo, "exit 1", {"DEPLOY_KEY": SECRET})
    for trial in session.query(Trial).filter_by(job_id=job_id):  # as an older worker stored it
        trial.failure_reason = f"build command exited 1\nkey={SECRET}"
    session.flush()
    listed = client.get(f"/api/jobs/{job_id}/trials").json()
    assert listed and all(t["failure_reason"] == f"build command exited 1\nkey={REDACTED}" for t in listed)


def test_scrub_matches_values_longest_first_and_leaves_short_ones() -> None:
    secrets = env_secrets({"URL": "https://bot:pa55word@host/x", "KEY": "abcdef123", "FLAG": "0"})
    text = "clone https://bot:pa55word@host/x with pa55word and abcdef123, flag 0"
    assert scrub(text, secrets) == f"clone {REDACTED} with {REDACTED} and {REDACTED}, flag 0"
