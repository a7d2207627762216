"""Identical submissions at the same moment, from threads with their own sessions and real
commits on PostgreSQL (not the rolled-back test transaction): one job, never a 500. The job's
normalized-request hash is unique among open jobs; the losers wait on the index, then find the
winner's job. Revisions and cases are inserted once (INSERT ... ON CONFLICT DO NOTHING)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from perfbisect import dispatch
from perfbisect.service.models import ApiToken, Case, Job, Repository, Revision
from tests.gitrepo import make_repo

THREADS = 6


@pytest.fixture
def committed(migrated_engine, tmp_path: Path, monkeypatch):
    """A repository and two submit tokens committed for real; deleted afterwards. Tasks the
    requests send after their commits are recorded, not run."""
    from perfbisect.service.auth import service as auth
    from perfbisect.service.auth.principal import Scope
    from perfbisect.service.db import session_scope
    from perfbisect.service.repos import service as repos
    from perfbisect.service.repos.schemas import RepositoryCreate

    sent: list[tuple] = []
    monkeypatch.setattr(dispatch, "send", lambda task, *args, queue=None: sent.append((task, args)))
    monkeypatch.setattr(dispatch, "drain_in_background", lambda: None)
    tag = uuid.uuid4().hex[:8]
    path = tmp_path / "lib"
    make_repo(path, [f"change {i} (#{i})" for i in range(1, 9)])
    with session_scope() as session:
        repos.create(session, RepositoryCreate(name=f"race-{tag}", url=str(path)))
        tokens = [auth.create_token(session, f"race-{tag}-{i}", [Scope.submit])[1] for i in range(2)]
    yield {"name": f"race-{tag}", "tokens": tokens, "sent": sent}
    with session_scope() as session:
        session.execute(delete(Repository).where(Repository.name == f"race-{tag}"))
        session.execute(delete(ApiToken).where(ApiToken.name.like(f"race-{tag}-%")))


def submit_at_once(bodies_and_headers: list[tuple[dict, dict]]) -> list:
    """POST each (body, headers) from its own thread, released together by a barrier."""
    from perfbisect.service.api import create_app

    app = create_app()
    barrier = threading.Barrier(len(bodies_and_headers))
    responses: list = [None] * len(bodies_and_headers)

    def post(i: int, body: dict, headers: dict) -> None:
        with TestClient(app, raise_server_exceptions=False) as client:
            barrier.wait()
            responses[i] = client.post("/api/jobs/bisect", json=body, headers=headers)

    threads = [threading.Thread(target=post, args=(i, b, h)) for i, (b, h) in enumerate(bodies_and_headers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return responses


def body(name: str) -> dict:
    return {"repository": name, "good": "HEAD~7", "bad": "main", "suite": "gemm", "target": "minikern.gemm:matmul",
            "shapes": ["M=64,N=64,K=64,dtype=fp32", "M=32,N=32,K=32,dtype=fp32"]}


def rows(model, repository_id: int) -> int:
    from perfbisect.service.db import session_scope

    with session_scope() as session:
        return session.scalar(select(func.count()).select_from(model).where(model.repository_id == repository_id))


def repository_id(name: str) -> int:
    from perfbisect.service.db import session_scope

    with session_scope() as session:
        return session.scalars(select(Repository.id).where(Repository.name == name)).one()


def test_identical_concurrent_submissions_make_one_job(committed) -> None:
    tokens = committed["tokens"]
    requests = [(body(committed["name"]), {"Authorization": f"Bearer {tokens[i % 2]}"}) for i in range(THREADS)]
    responses = submit_at_once(requests)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (THREADS - 1) + [202], [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    repo_id = repository_id(committed["name"])
    assert rows(Job, repo_id) == 1
    assert rows(Revision, repo_id) == 8 and rows(Case, repo_id) == 2
    assert committed["sent"] == [("perfbisect.advance_job", (responses[0].json()["id"],))]


def test_same_idempotency_key_concurrently_is_one_job_and_later_the_same_job(committed) -> None:
    headers = {"Authorization": f"Bearer {committed['tokens'][0]}", "Idempotency-Key": "submit-1"}
    responses = submit_at_once([(body(committed["name"]), headers)] * 4)
    assert sorted(r.status_code for r in responses) == [200, 200, 200, 202], [r.text for r in responses]
    job_id = responses[0].json()["id"]
    assert {r.json()["id"] for r in responses} == {job_id}
    (again,) = submit_at_once([(body(committed["name"]), headers)])
    assert (again.status_code, again.json()["id"]) == (200, job_id)
    (other_body,) = submit_at_once([({**body(committed["name"]), "good": "HEAD~6"}, headers)])
    assert other_body.status_code == 422 and "different request" in other_body.json()["detail"]
    assert rows(Job, repository_id(committed["name"])) == 1


def test_a_submission_racing_an_uncommitted_identical_one_waits_and_returns_it(committed, migrated_engine) -> None:
    """Deterministic: the first transaction holds its job uncommitted while the second submits;
    the second blocks on the unique keys, and once the first commits it returns that job."""
    from sqlalchemy import text

    from perfbisect.service.auth.principal import SYSTEM
    from perfbisect.service.db import get_sessionmaker, session_scope
    from perfbisect.service.jobs import service as jobs
    from perfbisect.service.jobs.schemas import BisectCreate

    request = BisectCreate(**body(committed["name"]))
    first = get_sessionmaker()()
    try:
        winner = jobs.submit_bisect(first, request, SYSTEM)
        assert winner.created
        outcome: dict = {}

        def second() -> None:
            with session_scope() as session:
                outcome["submission"] = jobs.submit_bisect(session, request, SYSTEM)

        thread = threading.Thread(target=second)
        thread.start()
        with migrated_engine.connect() as conn:  # wait until the second one waits on a lock
            for _ in range(200):
                if conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                     "AND datname = current_database()")).scalar():
                    break
                thread.join(timeout=0.05)
            else:
                pytest.fail("the second submission never waited on the first")
        first.commit()
        thread.join(timeout=60)
    finally:
        first.close()
    assert outcome["submission"].created is False
    assert outcome["submission"].job.id == winner.job.id
    assert rows(Job, repository_id(committed["name"])) == 1
