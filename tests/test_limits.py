"""Limits on callers (issue 22): a request body past the limit is refused with 413 before it is
read (a real server, a declared 512 MiB body and a chunked one); requests per token and bad-token
attempts per address get 429 with Retry-After (in this process, and in Redis shared by processes);
a token's open jobs and queued trials are capped; a target must be the repository's, not `os:system`."""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
import uvicorn

from perfbisect.service.auth import ratelimit
from perfbisect.service.errors import TooManyRequests
from perfbisect.service.jobs import advance
from perfbisect.service.settings import get_settings
from tests.gitrepo import make_repo

GEMM = {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}


@pytest.fixture
def limited(monkeypatch):
    """Settings changed by the test, and rate counters of its own."""
    ratelimit.reset()

    def set_(**values) -> None:
        for name, value in values.items():
            monkeypatch.setattr(get_settings(), name, value)
        ratelimit.reset()

    yield set_
    monkeypatch.undo()
    ratelimit.reset()


@pytest.fixture
def lib(client, tmp_path: Path) -> str:
    make_repo(tmp_path / "lib", [f"change {i}" for i in range(6)])
    assert client.post("/api/repositories", json={"name": "lib", "url": str(tmp_path / "lib")}).status_code == 201
    return "lib"


def bisect(good: str = "HEAD~5", **extra) -> dict:
    return {"repository": "lib", "good": good, "bad": "main", **GEMM, **extra}


# Request bodies, on a real server: nothing is read past the limit.

@pytest.fixture(scope="module")
def server() -> tuple[str, int]:
    from perfbisect.service.api import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    running = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not running.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.started
    yield "127.0.0.1", port
    running.should_exit = True
    thread.join(10)


def status_of(conn: socket.socket, timeout_s: float) -> int | None:
    """The status of the response the server sent within `timeout_s`, or None."""
    readable, _, _ = select.select([conn], [], [], timeout_s)
    if not readable:
        return None
    head = conn.recv(4096)
    return int(head.split()[1]) if head.startswith(b"HTTP/") else None


def test_a_declared_huge_body_is_refused_before_it_is_read(server) -> None:
    with socket.create_connection(server, timeout=10) as conn:
        conn.sendall(b"POST /api/jobs/bisect HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 536870912\r\n\r\n" + b"{" * 65536)
        assert status_of(conn, 5) == 413  # anonymous, and no byte past the first 64 KiB was needed


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(server) -> None:
    sent, status = 0, None
    chunk = b"x" * 65536
    with socket.create_connection(server, timeout=10) as conn:
        conn.sendall(b"POST /api/jobs/bisect HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        while sent < 64 * 2**20 and status is None:
            try:
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:  # the server answered and closed
                break
            sent += len(chunk)
            status = status_of(conn, 0)
        status = status or status_of(conn, 5)
    assert status == 413 and sent < 32 * 2**20, (status, sent)


def test_body_limits_say_which_and_webhooks_have_their_own(client, limited) -> None:
    too_big = client.post("/api/jobs/bisect", content=b" " * (2**20 + 1), headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413
    assert too_big.json()["detail"] == ("the request body is larger than the limit of 1048576 bytes "
                                        "(PERFBISECT_MAX_BODY_BYTES; PERFBISECT_WEBHOOK_MAX_BODY_BYTES for webhooks)")
    webhook = client.post("/api/webhooks/github", content=b"{}" + b" " * (2**20 + 1))
    assert webhook.status_code != 413  # up to 25 MiB by default


def test_the_webhook_limit_is_configurable(limited, make_client, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "webhook_max_body_bytes", 4096)
    from fastapi.testclient import TestClient

    from perfbisect.service.api import create_app

    with TestClient(create_app()) as fresh:
        assert fresh.post("/api/webhooks/github", content=b" " * 5000).status_code == 413
        assert fresh.post("/api/webhooks/github", content=b"{}").status_code != 413


# Rate limits.

def test_a_token_past_its_rate_gets_429_with_retry_after(make_client, limited) -> None:
    limited(token_rate_limit="5/minute")
    busy, other = make_client("read"), make_client("read")
    assert [busy.get("/api/jobs").status_code for _ in range(5)] == [200] * 5
    refused = busy.get("/api/jobs")
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "sent more than 5/minute requests" in refused.json()["detail"]
    assert other.get("/api/jobs").status_code == 200  # per token


def test_bad_tokens_from_one_address_get_429(make_client, anonymous_client, limited) -> None:
    limited(bad_token_rate_limit="3/minute")
    guess = {"Authorization": "Bearer pbt_guess"}
    assert [anonymous_client.get("/api/jobs", headers=guess).status_code for _ in range(3)] == [401] * 3
    refused = anonymous_client.get("/api/jobs", headers=guess)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "too many requests with a bad token" in refused.json()["detail"]
    assert anonymous_client.get("/api/jobs", headers={"Authorization": "Bearer pbt_other"}).status_code == 429
    assert make_client("read").get("/api/jobs").status_code == 200  # a valid token from there is not locked out
    assert make_client("submit").post("/api/jobs/bisect", json={}).status_code == 422  # past auth, to validation
    assert anonymous_client.get("/api/jobs").status_code == 200  # a public read needs no token


def test_429_is_in_the_schema_with_retry_after(anonymous_client) -> None:
    schema = anonymous_client.get("/openapi.json").json()
    for path in ("/api/jobs/bisect", "/api/jobs/{job_id}", "/api/alerts/{alert_id}"):
        for operation in schema["paths"][path].values():
            declared = operation["responses"].get("429")
            assert declared and "Retry-After" in declared["headers"], (path, operation.get("operationId"))


def test_with_redis_every_process_counts_together(limited) -> None:
    redis_url = os.environ.get("PERFBISECT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    limited(redis_url=redis_url, token_rate_limit="3/minute")
    token_id = uuid.uuid4().int % 10**9
    for _ in range(3):
        ratelimit.token_request(token_id, "shared")
        ratelimit.reset()  # a new limiter, as another API process has: the count is Redis's
    with pytest.raises(TooManyRequests) as refused:
        ratelimit.token_request(token_id, "shared")
    assert refused.value.status_code == 429 and int(refused.value.headers["Retry-After"]) >= 1


def test_a_rate_limit_that_does_not_parse_fails_at_start() -> None:
    from pydantic import ValidationError

    from perfbisect.service.settings import Settings

    with pytest.raises(ValidationError, match="token_rate_limit"):
        Settings(token_rate_limit="lots")


# Quotas.

def test_a_token_may_have_so_many_open_jobs(client, make_client, lib, limited) -> None:
    limited(max_open_jobs_per_token=2)
    submitter = make_client("submit")
    first = submitter.post("/api/jobs/bisect", json=bisect("HEAD~5"))
    assert first.status_code == 202 and submitter.post("/api/jobs/bisect", json=bisect("HEAD~4")).status_code == 202
    third = submitter.post("/api/jobs/bisect", json=bisect("HEAD~3"))
    assert third.status_code == 429 and "Retry-After" not in third.headers
    assert third.json()["detail"] == (f"the token {submitter.principal.name!r} has 2 queued or running jobs, the most "
                                      "one token may have (PERFBISECT_MAX_OPEN_JOBS_PER_TOKEN=2): wait for one to "
                                      "finish or cancel one")
    assert submitter.post("/api/jobs/bisect", json=bisect("HEAD~5")).status_code == 200  # the same open job
    assert make_client("submit").post("/api/jobs/bisect", json=bisect("HEAD~3")).status_code == 202  # per token
    submitter.post(f"/api/jobs/{first.json()['id']}/cancel")
    assert submitter.post("/api/jobs/bisect", json=bisect("HEAD~3")).status_code == 200  # the other token's job


def test_a_token_may_have_so_many_trials_queued(session, make_client, lib, limited) -> None:
    limited(max_queued_trials_per_token=3)
    submitter = make_client("submit")
    job_id = submitter.post("/api/jobs/bisect", json=bisect(workers=4)).json()["id"]
    assert len(advance.advance(session, job_id).trial_ids) >= 3
    refused = submitter.post("/api/jobs/bisect", json=bisect("HEAD~2"))
    assert refused.status_code == 429 and "PERFBISECT_MAX_QUEUED_TRIALS_PER_TOKEN=3" in refused.json()["detail"]


# Targets.

@pytest.mark.parametrize(("target", "message"), [
    ("os:system", "names Python's own module 'os'"),
    ("subprocess:run", "names Python's own module 'subprocess'"),
    ("perfbisect.service.db:get_engine", "names Python's own module 'perfbisect'"),
    ("torch.hub:load", "names the installed package 'torch'"),
])
def test_a_target_outside_the_repository_is_refused(make_client, lib, target, message) -> None:
    refused = make_client("submit").post("/api/jobs/bisect", json=bisect(target=target))
    assert refused.status_code == 422 and message in refused.json()["detail"], refused.text


def test_an_admin_may_name_a_package_the_repository_shadows(client, lib) -> None:
    assert client.post("/api/jobs/bisect", json=bisect(target="torch.hub:load")).status_code == 202
    assert client.post("/api/jobs/bisect", json=bisect(target="os:system")).status_code == 422
