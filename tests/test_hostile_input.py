"""Hostile requests, table-driven, with an admin token on the real PostgreSQL: ids past the
tables' integer range, strings longer than their columns, NUL bytes and lone surrogates, git's
unsafe transports and option-like refs, local paths outside the allowed roots, policy keys of
the wrong type or unbounded, device classes nobody serves, cases too large for any device.
Each is a 4xx whose body is one of the two declared error forms, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from perfbisect.service.models import Job, Repository
from tests.gitrepo import make_repo

GEMM = {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}
HUGE = "9" * 30  # past 64 bits


@pytest.fixture
def lib(client, tmp_path: Path) -> Path:
    path = tmp_path / "lib"
    make_repo(path, ["initial import (#1)", "add gemm (#2)", "tune tiles (#3)"])
    assert client.post("/api/repositories", json={"name": "lib", "url": str(path)}).status_code == 201
    return path


def assert_declared_error(response) -> None:
    """The body is FastAPI's list of issues or a message, as the schema declares for 4xx."""
    detail = response.json()["detail"]
    if isinstance(detail, list):
        assert detail and all(isinstance(i["loc"], list) and isinstance(i["msg"], str) and isinstance(i["type"], str)
                              for i in detail)
    else:
        assert isinstance(detail, str) and detail


def bisect(**overrides) -> dict:
    return {"repository": "lib", "good": "HEAD~2", "bad": "main", **GEMM, **overrides}


def register(name: str = "x", **overrides) -> dict:
    return {"name": name, "url": "/tmp/nowhere", **overrides}


URL_CASES = [
    # (request, status, words in the message)
    (("GET", f"/api/jobs/{HUGE}", None), 422, "less than or equal"),
    (("GET", "/api/jobs/2147483648", None), 422, "less than or equal"),
    (("GET", "/api/jobs/0", None), 422, "greater than or equal"),
    (("GET", "/api/jobs/-1/trials", None), 422, "greater than or equal"),
    (("POST", f"/api/jobs/{HUGE}/cancel", None), 422, "less than or equal"),
    (("GET", f"/api/jobs/{HUGE}/report", None), 422, "less than or equal"),
    (("GET", f"/dashboard/jobs/{HUGE}", None), 422, "less than or equal"),
    (("GET", "/api/repositories/a%00b", None), 422, "pattern"),
    (("GET", "/api/repositories/" + "a" * 101, None), 422, "at most 100"),
    (("GET", "/api/history/lib?suite=%00", None), 422, "pattern"),
    (("GET", "/dashboard/repositories/lib?case=%00", None), 422, "pattern"),
    (("GET", "/api/jobs?limit=" + HUGE, None), 422, "less than or equal"),
]

REGISTER_CASES = [
    (register(url="ext::sh -c touch% /tmp/pwned"), 422, "remote-helper"),
    (register(url="fd::3"), 422, "remote-helper"),
    (register(url="file::/tmp/x"), 422, "remote-helper"),
    (register(url="--upload-pack=touch /tmp/pwned"), 422, "must not start with '-'"),
    (register(url="."), 422, "must be absolute"),
    (register(url="/etc"), 422, "outside the allowed roots"),
    (register(url="file:///etc"), 422, "outside the allowed roots"),
    (register(url="/tmp/../etc"), 422, "outside the allowed roots"),
    (register(url="ftp://example.com/x.git"), 422, "scheme 'ftp'"),
    (register(name="n" * 101), 422, "pattern"),
    (register(url="u" * 2001), 422, "at most 2000"),
    (register(build_command="make\x00; id"), 422, "pattern"),
    (register(build_command="x" * 10_001), 422, "at most 10000"),
    (register(env={"A=B": "1"}), 422, "pattern"),
    (register(env={"TOKEN": "a\x00b"}), 422, "pattern"),
    (register(env={f"V{i}": "1" for i in range(65)}), 422, "at most 64"),
    (register(import_root="../outside"), 422, "inside the repository"),
    (register(import_root="/abs"), 422, "inside the repository"),
    (register(default_branch="--upload-pack=x"), 422, "pattern"),
    (register(default_branch="b" * 201), 422, "at most 200"),
]

BISECT_CASES = [
    (bisect(good="g" * 256), 422, "at most 255"),
    (bisect(good="HEAD\x00"), 422, "pattern"),
    (bisect(good="--upload-pack=touch /tmp/pwned"), 422, "invalid ref"),
    (bisect(bad="-c core.sshCommand=id"), 422, "invalid ref"),
    (bisect(repository="r" * 101), 422, "at most 100"),
    (bisect(target="m" * 400 + ":f"), 422, "at most 300"),
    (bisect(shapes=[{"M": 64, "N": "\x00", "K": 64}]), 422, "pattern"),
    (bisect(shapes=[{"M": 10**30, "N": 64, "K": 64}]), 422, "must be a positive integer"),
    (bisect(shapes=["M=1000000000000000000000000000000,N=64,K=64"]), 422, "GiB"),
    (bisect(shapes=["M=64,N=64,K=64," + "x" * 500]), 422, "at most 500"),
    (bisect(shapes=[f"M={i},N=8,K=8" for i in range(1, 258)]), 422, "at most 256"),
    (bisect(shapes=["M=1000000,N=1000000,K=1000000"]), 422, "GiB"),
    (bisect(suite="attention", target="m.a:f", shapes=["B=64,H=64,S=1000000,D=128"]), 422, "GiB"),
    (bisect(suite="file:bench/s.py", shapes=[{f"k{i}": "v" * 100 for i in range(3)}]), 422, "longer than 300"),
    (bisect(policy={"max_samples": 1e12}), 422, "less than or equal"),
    (bisect(policy={"max_samples": "lots"}), 422, "integer"),
    (bisect(policy={"unknown_key": 1}), 422, "Extra inputs"),
    (bisect(policy={"min_samples": 20, "max_samples": 10}), 422, "above max_samples"),
    (bisect(policy={"rel_noise": 0}), 422, "greater than"),
    (bisect(device_class="tpu"), 422, "no worker serves device class 'tpu'"),
    (bisect(suite="flydsl_attention", target="kernels.attention.flash_attn_interface:flydsl_flash_attn_func",
            shapes=["B=2,H=32,S=61380,D=128"], device_class="cuda"), 422, "needs ROCm and flydsl/aiter"),
    (bisect(suite="flydsl_gemm", target="kernels.gemm.preshuffle_gemm:compile_preshuffle_gemm",
            shapes=["M=54560,N=8192,K=8192,tile_m=128,tile_n=256,tile_k=96"]), 422, "tile_k must divide K"),
    (bisect(device_class="CUDA; rm"), 422, "pattern"),
    (bisect(workers=10**20), 422, "less than or equal"),
]


def call(client, method: str, path: str, body):
    return client.request(method, path, json=body) if body is not None else client.request(method, path)


def counts(session) -> tuple[int, int]:
    return (session.scalar(select(func.count()).select_from(Job)),
            session.scalar(select(func.count()).select_from(Repository)))


@pytest.mark.parametrize(("request_", "status", "message"), URL_CASES, ids=[c[0][1][:40] for c in URL_CASES])
def test_hostile_urls_are_4xx(client, lib, request_, status, message) -> None:
    response = call(client, *request_)
    assert response.status_code == status, response.text
    assert_declared_error(response)
    assert message in response.text


@pytest.mark.parametrize(("body", "status", "message"), REGISTER_CASES,
                         ids=[json.dumps(c[0])[:50] for c in REGISTER_CASES])
def test_hostile_registrations_are_4xx_and_write_nothing(client, session, body, status, message) -> None:
    before = counts(session)
    response = client.post("/api/repositories", json=body)
    assert response.status_code == status, response.text
    assert_declared_error(response)
    assert message in response.text
    assert counts(session) == before


@pytest.mark.parametrize(("body", "status", "message"), BISECT_CASES, ids=[json.dumps(c[0])[:60] for c in BISECT_CASES])
def test_hostile_submissions_are_4xx_and_write_nothing(client, session, lib, sent_tasks, body, status, message) -> None:
    before = counts(session)
    response = client.post("/api/jobs/bisect", json=body)
    assert response.status_code == status, response.text
    assert_declared_error(response)
    assert message in response.text
    assert counts(session) == before and sent_tasks == []


@pytest.mark.parametrize("raw", [
    b'{"repository": "lib", "good": "HEAD~2", "bad": "main", "suite": "gemm", "target": "m:f", '
    b'"shapes": ["M=8,N=8,K=8"], "min_effect": NaN}',
    b'{"repository": "lib", "good": "\\ud800", "bad": "main", "suite": "gemm", "target": "m:f", "shapes": ["M=8,N=8,K=8"]}',
    b'{"repository": "lib", "good": "HEAD~2", "bad": "main", "suite": "gemm", "target": "m:f", "shapes": ["M=8,N=8,K=8"',
    b"\xff\xfe not utf-8",
], ids=["nan", "lone-surrogate", "truncated", "not-utf8"])
def test_malformed_bodies_are_4xx(client, session, lib, raw) -> None:
    response = client.post("/api/jobs/bisect", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code in (400, 422), response.text
    assert_declared_error(response)
    assert counts(session)[0] == 0


def test_compare_pr_number_past_the_integer_columns_is_422(client, lib) -> None:
    response = client.post("/api/jobs/compare", json={"repository": "lib", "base": "HEAD~1", "head": "main",
                                                      "benchmarks": [GEMM], "pr_number": 10**20})
    assert response.status_code == 422
    assert_declared_error(response)


@pytest.mark.parametrize("key", ["k" * 256, "spaced key", "ключ"], ids=["long", "space", "non-ascii"])
def test_bad_idempotency_keys_are_422(client, lib, key) -> None:
    response = client.post("/api/jobs/bisect", json=bisect(), headers={"Idempotency-Key": key.encode()})
    assert response.status_code == 422, response.text
    assert_declared_error(response)


def test_ext_url_never_runs_its_command(client, tmp_path) -> None:
    marker = tmp_path / "pwned"
    response = client.post("/api/repositories", json=register(url=f"ext::sh -c touch% {marker}"))
    assert response.status_code == 422
    assert not marker.exists()


def test_commit_metadata_past_the_columns_is_stored_not_a_500(client, tmp_path) -> None:
    """The repository's own content (a PR number past 32 bits, a 300-character author) is data."""
    from tests.gitrepo import git

    path = tmp_path / "odd"
    make_repo(path, ["initial import (#1)"])
    (path / "f.txt").write_text("x")
    git(path, "add", "-A")
    git(path, "-c", "user.name=" + "a" * 300, "commit", "-q", "-m", "huge (#99999999999)")
    assert client.post("/api/repositories", json={"name": "odd", "url": str(path)}).status_code == 201
    response = client.post("/api/jobs/bisect", json={**bisect(repository="odd", good="HEAD~1")})
    assert response.status_code == 202, response.text
