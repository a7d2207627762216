"""Who may do what, on the real PostgreSQL: the scope matrix of every write (anonymous, read,
submit, admin), cancel by the submitter or an admin only, public or private reads, build logs and
env values hidden from anonymous readers, bad and revoked tokens, tokens stored hashed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sqlalchemy import select

from perfbisect.service.models import ApiToken
from perfbisect.service.settings import get_settings
from tests.gitrepo import make_repo

GEMM = {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}
ROLES = ("anonymous", "read", "submit", "admin")


@pytest.fixture
def clients(anonymous_client, read_client, submit_client, client) -> dict:
    return {"anonymous": anonymous_client, "read": read_client, "submit": submit_client, "admin": client}


@pytest.fixture
def lib(client, tmp_path: Path) -> Path:
    path = tmp_path / "lib"
    make_repo(path, ["initial import (#1)", "add gemm (#2)", "tune tiles (#3)", "docs (#4)"])
    response = client.post("/api/repositories", json={"name": "lib", "url": str(path), "env": {"PIP_TOKEN": "s3"}})
    assert response.status_code == 201, response.text
    return path


def bisect(good: str = "HEAD~3") -> dict:
    return {"repository": "lib", "good": good, "bad": "main", **GEMM}


@pytest.mark.parametrize(("role", "expected"), list(zip(ROLES, (401, 403, 403, 201))))
def test_registering_a_repository_is_admin_only(clients, tmp_path, role, expected) -> None:
    make_repo(tmp_path / "other", ["one (#1)", "two (#2)"])
    response = clients[role].post("/api/repositories", json={
        "name": "other", "url": str(tmp_path / "other"), "build_command": "id > proof; env; exit 1"})
    assert response.status_code == expected, response.text
    if expected == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in response.json()["detail"]
    if expected == 403:
        assert "lacks the admin scope" in response.json()["detail"]


@pytest.mark.parametrize(("role", "expected"), list(zip(ROLES, (401, 403, 202, 202))))
def test_submitting_needs_the_submit_scope(clients, lib, sent_tasks, role, expected) -> None:
    response = clients[role].post("/api/jobs/bisect", json=bisect())
    assert response.status_code == expected, response.text
    assert len(sent_tasks) == (1 if expected == 202 else 0)


@pytest.mark.parametrize(("role", "expected"), [("anonymous", 401), ("read", 403), ("other submitter", 403),
                                                ("submitter", 200), ("admin", 200)])
def test_a_job_is_cancelled_by_its_submitter_or_an_admin(clients, make_client, lib, role, expected) -> None:
    submitter = clients["submit"]
    job_id = submitter.post("/api/jobs/bisect", json=bisect()).json()["id"]
    caller = {"other submitter": make_client("submit"), "submitter": submitter}.get(role) or clients[role]
    response = caller.post(f"/api/jobs/{job_id}/cancel")
    assert response.status_code == expected, response.text
    status = clients["read"].get(f"/api/jobs/{job_id}").json()["status"]
    assert status == ("cancelled" if expected == 200 else "queued")


READS = ["/api/jobs", "/api/jobs/{job}", "/api/jobs/{job}/trials", "/api/jobs/{job}/report", "/api/repositories",
         "/api/repositories/lib", "/api/history", "/api/history/lib", "/dashboard", "/dashboard/jobs/{job}"]


@pytest.mark.parametrize("public", [True, False], ids=["public", "private"])
def test_reads_are_public_or_need_the_read_scope(clients, lib, monkeypatch, public) -> None:
    job_id = clients["submit"].post("/api/jobs/bisect", json=bisect()).json()["id"]
    monkeypatch.setattr(get_settings(), "public_reads", public)
    for path in (p.format(job=job_id) for p in READS):
        anonymous = clients["anonymous"].get(path)
        assert anonymous.status_code == (200 if public else 401), (path, anonymous.text)
        for role in ("read", "submit", "admin"):
            assert clients[role].get(path).status_code == 200, (path, role)


def test_bad_or_revoked_tokens_are_401_even_on_public_reads(make_client, session) -> None:
    from perfbisect.service.auth import service as auth

    wrong = make_client()
    wrong.headers["Authorization"] = "Bearer pbt_not-a-token"
    response = wrong.get("/api/jobs")
    assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
    revoked = make_client("admin")
    auth.revoke(session, revoked.principal.name)
    response = revoked.post("/api/repositories", json={"name": "x", "url": "/tmp/x"})
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


def test_build_logs_are_the_submitters_and_env_values_the_admins(clients, lib, session) -> None:
    from perfbisect.service.models import Revision, Trial, TrialStatus

    job_id = clients["submit"].post("/api/jobs/bisect", json=bisect()).json()["id"]
    revision = session.scalars(select(Revision)).first()
    session.add(Trial(job_id=job_id, revision_id=revision.id, status=TrialStatus.build_error,
                      failure_reason="DATABASE_URL=postgresql://user:pw@db/x"))
    session.flush()
    anonymous = clients["anonymous"].get(f"/api/jobs/{job_id}/trials").json()
    assert anonymous[0]["status"] == "build_error"
    assert "DATABASE_URL" not in str(anonymous) and anonymous[0]["failure_reason"] == "build failed"
    assert clients["read"].get(f"/api/jobs/{job_id}/trials").json()[0]["failure_reason"] == "build failed"
    for owner in ("submit", "admin"):  # the job's submitter and admins read the logs
        assert "DATABASE_URL" in clients[owner].get(f"/api/jobs/{job_id}/trials").json()[0]["failure_reason"]
    assert clients["anonymous"].get("/api/repositories/lib").json()["env"] == {"PIP_TOKEN": "***"}
    assert clients["submit"].get("/api/repositories/lib").json()["env"] == {"PIP_TOKEN": "***"}
    assert clients["admin"].get("/api/repositories/lib").json()["env"] == {"PIP_TOKEN": "s3"}


def test_tokens_are_stored_as_sha256_only(session) -> None:
    from perfbisect.service.auth import service as auth
    from perfbisect.service.auth.principal import Scope

    row, token = auth.create_token(session, "ci", [Scope.submit])
    stored = session.scalars(select(ApiToken).where(ApiToken.id == row.id)).one()
    assert token.startswith("pbt_") and len(token) > 40
    assert stored.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in (stored.token_hash, stored.prefix, stored.name)
    assert auth.authenticate(session, token).allows(Scope.read)
    assert not auth.authenticate(session, token).allows(Scope.admin)
