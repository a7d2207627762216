"""The REST API on the real PostgreSQL: registering repositories, submitting bisects, and the
bad-input table (each a 4xx with a message naming the problem, leaving no half-created job)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from perfbisect.service.jobs import resolution
from perfbisect.service.models import Case, Job, Revision
from perfbisect.service.settings import get_settings
from tests.gitrepo import git, make_repo

GEMM = {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}


@pytest.fixture
def repo_path(tmp_path: Path) -> Path:
    path = tmp_path / "lib"
    make_repo(path, ["initial import (#1)", "add gemm (#2)", "tune tiles (#3)", "docs (#4)", "fix rmsnorm (#5)"])
    return path


@pytest.fixture
def registered(client, repo_path: Path) -> str:
    response = client.post("/api/repositories", json={"name": "lib", "url": str(repo_path)})
    assert response.status_code == 201, response.text
    return "lib"


def bisect_body(**overrides) -> dict:
    return {"repository": "lib", "good": "HEAD~4", "bad": "main", **GEMM, **overrides}


def job_count(session) -> int:
    return session.scalar(select(func.count()).select_from(Job))


def test_register_and_list_repositories(client, registered: str) -> None:
    listed = client.get("/api/repositories").json()
    assert [r["name"] for r in listed] == ["lib"]
    assert client.get("/api/repositories/lib").json()["import_root"] == "."


def test_register_duplicate_name_is_409(client, registered: str, repo_path: Path) -> None:
    response = client.post("/api/repositories", json={"name": "lib", "url": str(repo_path)})
    assert response.status_code == 409
    assert "already registered" in response.json()["detail"]


def test_register_unreachable_url_is_422(client, tmp_path: Path) -> None:
    response = client.post("/api/repositories", json={"name": "nope", "url": str(tmp_path / "missing")})
    assert response.status_code == 422
    assert "cannot clone" in response.json()["detail"]


def test_submit_bisect_creates_job_revisions_and_cases(client, session, registered: str, sent_tasks) -> None:
    response = client.post("/api/jobs/bisect", json=bisect_body())
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert response.json()["revisions"] == 5
    assert sent_tasks == [("perfbisect.advance_job", (job_id,))]
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "queued"
    assert job["spec"]["cases"][0]["name"] == "gemm M=64,N=64,K=64,dtype=fp32"
    prs = session.scalars(select(Revision.pr_number).order_by(Revision.id)).all()
    assert prs == [1, 2, 3, 4, 5]
    assert session.scalar(select(func.count()).select_from(Case)) == 1


@pytest.mark.parametrize(
    ("overrides", "status", "message"),
    [
        ({"repository": "unknown"}, 404, "no repository 'unknown'"),
        # a ref the mirror does not know is accepted and resolved by the job's task (test_resolution.py)
        ({"good": "main"}, 422, "same commit"),
        ({"good": "main", "bad": "HEAD~2"}, 422, "not a descendant"),
        ({"good": "--upload-pack=touch /tmp/pwned"}, 422, "invalid ref"),
        ({"shapes": ["M=64,N=sixty-four,K=64"]}, 422, "shape"),
        ({"shapes": ["nonsense"]}, 422, "shape"),
        ({"target": "not a target"}, 422, "target"),
        ({"suite": "fft"}, 422, "fft"),
        ({"shapes": []}, 422, "shapes"),
        ({"min_effect": 0}, 422, "min_effect"),
        ({"scan": "most"}, 422, "auto"),
        ({"scan": 33}, 422, "less than or equal to 32"),
        ({"scan": 4, "max_gap": 3}, 422, "max_gap goes with scan"),
        ({"scan": "auto", "max_gap": 0}, 422, "max_gap"),
    ],
)
def test_bad_bisect_input_is_4xx_and_writes_nothing(client, session, registered, sent_tasks, overrides, status,
                                                    message) -> None:
    before = job_count(session)
    response = client.post("/api/jobs/bisect", json=bisect_body(**overrides))
    assert response.status_code == status, response.text
    assert message in str(response.json()["detail"])
    assert job_count(session) == before
    assert sent_tasks == []


def test_range_over_cap_is_422(client, session, registered, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "max_range", 2)
    response = client.post("/api/jobs/bisect", json=bisect_body())
    assert response.status_code == 422
    assert "over the cap of 2" in response.json()["detail"]
    assert job_count(session) == 0


def test_upload_pack_ref_never_reaches_git(client, registered, tmp_path) -> None:
    marker = tmp_path / "pwned"
    response = client.post("/api/jobs/bisect", json=bisect_body(good=f"--upload-pack=touch {marker}"))
    assert response.status_code == 422
    assert not marker.exists()


def test_bisect_by_sha_prefix_and_tag(client, session, registered, repo_path) -> None:
    git(repo_path, "tag", "v1", "HEAD~3")
    good_sha = git(repo_path, "rev-parse", "HEAD~3")
    response = client.post("/api/jobs/bisect", json=bisect_body(good="v1"))
    assert response.status_code == 202, response.text
    # v1 was tagged after the mirror's fetch: the job's task fetches and resolves it
    target = resolution.fetch_target(session, response.json()["id"])
    resolution.finish(session, response.json()["id"], target.mirror.fetch_once(target.since, 30))
    job = client.get(response.json()["url"]).json()
    assert job["spec"]["good_sha"] == good_sha
    assert len(job["revision_shas"]) == 4


def test_cancel_job(client, registered) -> None:
    job_id = client.post("/api/jobs/bisect", json=bisect_body()).json()["id"]
    cancelled = client.post(f"/api/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    again = client.post(f"/api/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert "already cancelled" in again.json()["detail"]


def test_unknown_job_is_404(client) -> None:
    response = client.get("/api/jobs/999999")
    assert response.status_code == 404
    assert response.json()["detail"] == "no job 999999"


def test_errors_are_rfc_7807_problems_keeping_their_detail(client) -> None:
    missing = client.get("/api/jobs/999999")
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json() == {"type": "about:blank", "title": "Not Found", "status": 404,
                              "detail": "no job 999999", "instance": "/api/jobs/999999"}
    unparsed = client.post("/api/jobs/bisect", json={"repository": 5})
    assert unparsed.status_code == 422 and unparsed.headers["content-type"] == "application/problem+json"
    body = unparsed.json()
    assert (body["title"], body["status"], body["instance"]) == ("Unprocessable Entity", 422, "/api/jobs/bisect")
    assert {"loc", "msg", "type"} <= set(body["detail"][0])  # the validation issues, as before


def test_openapi_declares_errors_as_problems(client) -> None:
    schema = client.get("/openapi.json").json()
    responses = schema["paths"]["/api/jobs/{job_id}"]["get"]["responses"]
    assert set(responses["404"]["content"]) == {"application/problem+json"}
    assert set(responses["200"]["content"]) == {"application/json"}
    problem = schema["components"]["schemas"]["ErrorMessage"]
    assert set(problem["required"]) == {"title", "status", "instance", "detail"}


def test_healthz_checks_database(client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["database"] == "ok"


def test_openapi_documents_the_job_routes(client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/jobs/bisect", "/api/jobs/{job_id}", "/api/jobs/{job_id}/cancel", "/api/jobs/{job_id}/trials",
                 "/api/repositories", "/healthz"):
        assert path in paths
