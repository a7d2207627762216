"""`perfbisect token create|list|revoke` and the CLI's local admin token, on the real database
(these commit, like the CLI does; every row they make is deleted afterwards)."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import pytest
from sqlalchemy import delete
from typer.testing import CliRunner

from perfbisect import dispatch
from perfbisect.service.auth import service as auth
from perfbisect.service.auth.principal import Scope
from perfbisect.service.db import session_scope
from perfbisect.service.errors import Unauthenticated
from perfbisect.service.models import ApiToken, Repository
from perfbisect.service.settings import get_settings
from tests.gitrepo import make_repo

runner = CliRunner()


@pytest.fixture
def tag(migrated_engine):
    """A unique prefix for the names a test commits; its tokens and repositories go afterwards."""
    tag = f"cli-{uuid.uuid4().hex[:8]}"
    yield tag
    with session_scope() as session:
        session.execute(delete(Repository).where(Repository.name.like(f"{tag}%")))
        session.execute(delete(ApiToken).where(ApiToken.name.like(f"{tag}%") | ApiToken.name.like("local-cli%")))


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(get_settings(), "home", tmp_path / "home")
    return tmp_path / "home"


def test_create_list_and_revoke(tag) -> None:
    from perfbisect.cli.main import app

    created = runner.invoke(app, ["token", "create", f"{tag}-ci", "--scope", "submit"])
    assert created.exit_code == 0, created.output
    token = created.stdout.strip().splitlines()[-1]
    assert token.startswith("pbt_")
    with session_scope() as session:
        assert auth.authenticate(session, token).allows(Scope.submit)
    listed = json.loads(runner.invoke(app, ["token", "list", "--json"]).stdout)
    mine = [t for t in listed if t["name"] == f"{tag}-ci"]
    assert mine and mine[0]["scopes"] == ["submit"] and token not in json.dumps(listed)
    assert runner.invoke(app, ["token", "create", f"{tag}-ci"]).exit_code == 2  # name taken
    assert runner.invoke(app, ["token", "create", f"{tag}-x", "--scope", "root"]).exit_code == 2
    assert runner.invoke(app, ["token", "revoke", f"{tag}-ci"]).exit_code == 0
    with session_scope() as session, pytest.raises(Unauthenticated, match="revoked"):
        auth.authenticate(session, token)
    assert runner.invoke(app, ["token", "revoke", f"{tag}-nope"]).exit_code == 2


def test_local_token_is_an_owner_only_admin_file_reused_until_revoked(tag, home) -> None:
    from perfbisect.cli.tokens import LOCAL_TOKEN_FILE, local_principal

    first = local_principal()
    path = home / LOCAL_TOKEN_FILE
    assert first.is_admin
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert local_principal().token_id == first.token_id
    path.chmod(0o644)
    assert local_principal().token_id == first.token_id
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with session_scope() as session:
        auth.revoke(session, str(first.token_id))
    replaced = local_principal()
    assert replaced.token_id != first.token_id and replaced.is_admin
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_api_calls_send_perfbisect_token_else_the_local_one(tag, home, monkeypatch) -> None:
    from perfbisect.cli.follow import _auth_headers
    from perfbisect.cli.tokens import local_principal, read_local_token

    monkeypatch.delenv("PERFBISECT_TOKEN", raising=False)
    assert _auth_headers() == {}
    local_principal()
    assert _auth_headers() == {"Authorization": f"Bearer {read_local_token()}"}
    monkeypatch.setenv("PERFBISECT_TOKEN", "pbt_from-env")
    assert _auth_headers() == {"Authorization": "Bearer pbt_from-env"}


def test_local_bisect_registers_its_path_and_submits_as_the_local_admin(tag, home, tmp_path, monkeypatch) -> None:
    """The CLI's own path needs no PERFBISECT_LOCAL_REPO_ROOTS; an identical open job left by an
    ended embedded process is replaced, not followed forever."""
    from perfbisect.cli.follow import submit_local
    from perfbisect.cli.runs import register_path
    from perfbisect.service.jobs import service as jobs
    from perfbisect.service.jobs.schemas import BisectCreate

    monkeypatch.setattr(get_settings(), "local_repo_roots", "")
    sent: list = []
    monkeypatch.setattr(dispatch, "send", lambda task, *args, queue=None: sent.append(args))
    monkeypatch.setattr(dispatch, "drain_in_background", lambda: None)
    path = tmp_path / "lib"
    make_repo(path, ["one (#1)", "two (#2)", "three (#3)"])
    name = register_path(path, None, name=f"{tag}-lib")
    request = BisectCreate(repository=name, good="HEAD~2", bad="main", suite="gemm", target="m.g:f",
                           shapes=["M=8,N=8,K=8,dtype=fp32"])
    first = submit_local(request)
    second = submit_local(request)
    assert first != second and sent == [(first,), (second,)]
    with session_scope() as session:
        assert jobs.get(session, first).status.value == "cancelled"
        job = jobs.get(session, second)
        assert job.status.value == "queued" and job.submitter_token_id is not None
