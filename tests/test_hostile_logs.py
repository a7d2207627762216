"""Build logs for those allowed to see them (issue 40, item 4). A repository's build prints its
`env` value base64'd, reversed and spaced (redaction by value cannot know those), and the head
of /etc/passwd, then exits 7. Anonymous readers and read tokens other than the submitter get the
failure's kind and exit code, never the log's text, in every answer that shows the job; its
submitter and admins get the tail, with the value itself still redacted."""

from __future__ import annotations

import base64

import pytest

from perfbisect.service.repos.redaction import REDACTED
from tests.test_redaction import failed_compare, leaky_repo  # noqa: F401  (leaky_repo is a fixture)

SECRET = "s3cr3t-deploy-key-7f3a9c"
ENCODED = base64.b64encode(SECRET.encode()).decode()
SPACED = " ".join(SECRET)
HOSTILE_BUILD = ('echo "clear $DEPLOY_KEY"; printf "%s" "$DEPLOY_KEY" | base64; echo; '
                 'printf "%s" "$DEPLOY_KEY" | rev; echo; printf "%s" "$DEPLOY_KEY" | sed "s/./& /g"; echo; '
                 'head -3 /etc/passwd; echo "MARKER-IN-THE-LOG"; exit 7')
LEAKS = (SECRET, ENCODED, SECRET[::-1], SPACED.strip(), "root:", "MARKER-IN-THE-LOG")


def _shown(client, job_id: int) -> dict[str, str]:
    return {
        "job": client.get(f"/api/jobs/{job_id}").text,
        "report": client.get(f"/api/jobs/{job_id}/report").text,
        "markdown": client.get(f"/api/jobs/{job_id}/report?format=markdown").text,
        "page": client.get(f"/dashboard/jobs/{job_id}").text,
        "trials": client.get(f"/api/jobs/{job_id}/trials").text,
        "list": client.get("/api/jobs").text,
    }


@pytest.fixture
def failed_job(session, client, submit_client, leaky_repo) -> int:
    return failed_compare(session, client, submit_client, *leaky_repo, HOSTILE_BUILD, {"DEPLOY_KEY": SECRET})


def test_anonymous_and_other_readers_get_the_kind_and_exit_code_only(failed_job, anonymous_client, make_client) -> None:
    for reader in (anonymous_client, make_client("read"), make_client("submit"), make_client("triage")):
        shown = _shown(reader, failed_job)
        for name, text in shown.items():
            for leak in LEAKS:
                assert leak not in text, (name, leak)
        job = reader.get(f"/api/jobs/{failed_job}").json()
        assert job["status"] == "failed"
        assert job["outcome"]["failures"] and {f["error"] for f in job["outcome"]["failures"]} == {"build failed: exit 7"}
        assert {c["error"] for c in job["outcome"]["cases"]} == {"build failed: exit 7"}
        assert "(exit 7)" in job["error"]
        trials = reader.get(f"/api/jobs/{failed_job}/trials").json()
        assert trials and {t["failure_reason"] for t in trials} == {"build failed: exit 7"}
        assert "build failed: exit 7" in shown["report"] and "build failed: exit 7" in shown["page"]


def test_the_submitter_and_admins_see_the_redacted_tail(failed_job, client, submit_client) -> None:
    for owner in (submit_client, client):
        job = owner.get(f"/api/jobs/{failed_job}").json()
        errors = [f["error"] for f in job["outcome"]["failures"]]
        assert errors and all("build command exited 7" in e and "MARKER-IN-THE-LOG" in e for e in errors), errors
        trials = owner.get(f"/api/jobs/{failed_job}/trials").json()
        assert all("root:" in t["failure_reason"] and f"clear {REDACTED}" in t["failure_reason"] for t in trials)
        for name, text in _shown(owner, failed_job).items():
            assert SECRET not in text, name  # redaction by value stays as a second line


def test_a_correctness_culprits_harness_message_is_the_submitters(session, failed_job, anonymous_client, client,
                                                                   submit_client) -> None:
    from perfbisect.service.models import Culprit, CulpritKind

    session.add(Culprit(job_id=failed_job, kind=CulpritKind.correctness, first_sha="a" * 40, last_sha="a" * 40,
                        effects={"gemm": {"error": 0.5, "tolerance": 0.01, "message": "MARKER-IN-THE-LOG root:x:0:0"}}))
    session.flush()
    public = anonymous_client.get(f"/api/jobs/{failed_job}").json()["culprits"][0]["wrong_cases"]["gemm"]
    assert public == {"error": 0.5, "tolerance": 0.01, "message": None}
    for owner in (submit_client, client):
        shown = owner.get(f"/api/jobs/{failed_job}").json()["culprits"][0]["wrong_cases"]["gemm"]
        assert shown["message"] == "MARKER-IN-THE-LOG root:x:0:0"
