"""`perfbisect token create|list|revoke`, and the CLI's own local admin token.

Tokens are managed by whoever can reach the database (the operator on the server); the API has
no endpoint that makes tokens. The CLI's own token lets `perfbisect demo` and `bisect` work with
no setup: it is created on first use and kept in PERFBISECT_HOME/cli-token, readable by its owner
only (0600). `--api` calls send PERFBISECT_TOKEN, or that file's token when there is none.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from perfbisect.cli.common import console, fail, prepare_database
from perfbisect.service.errors import PerfbisectError, Unauthenticated

if TYPE_CHECKING:
    from perfbisect.service.auth.principal import Principal

LOCAL_TOKEN_FILE = "cli-token"
LOCAL_TOKEN_NAME = "local-cli"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

app = typer.Typer(help="API tokens: create (shown once), list, revoke.", no_args_is_help=True, rich_markup_mode=None)


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="a name to recognise the token by (unique)")],
    scope: Annotated[list[str], typer.Option(help="read, submit, triage or admin (admin includes all; submit and triage include read)")] = ["read"],  # noqa: B006
) -> None:
    """Create a token and print it on stdout (only its hash is stored: it is shown this once)."""
    if not NAME_RE.match(name):
        fail(f"token name {name!r}: letters, digits, '_', '.', '-', at most 100")
    prepare_database()
    from perfbisect.service.auth import service as auth  # the database, only for the commands that open it
    from perfbisect.service.db import session_scope

    try:
        with session_scope() as session:
            row, token = auth.create_token(session, name, auth.parse_scopes(scope))
            summary = f"token {row.id} {row.name!r} with scope(s) {', '.join(row.scopes)}"
    except PerfbisectError as exc:
        fail(exc.message)
    console().print(f"created {summary}; send it as 'Authorization: Bearer <token>' or set PERFBISECT_TOKEN")
    print(token)


@app.command("list")
def list_tokens(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every token: id, name, prefix, scopes, created, last used, revoked."""
    prepare_database()
    from perfbisect.service.auth import service as auth  # the database, only for the commands that open it
    from perfbisect.service.db import session_scope

    with session_scope() as session:
        rows = [{"id": t.id, "name": t.name, "prefix": t.prefix, "scopes": t.scopes,
                 "created_at": t.created_at.isoformat(), "last_used_at": t.last_used_at and t.last_used_at.isoformat(),
                 "revoked_at": t.revoked_at and t.revoked_at.isoformat()} for t in auth.list_tokens(session)]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for t in rows:
        state = f"revoked {t['revoked_at'][:19]}" if t["revoked_at"] else f"last used {(t['last_used_at'] or 'never')[:19]}"
        print(f"{t['id']:>4}  {t['name']:<24} {t['prefix']}…  {','.join(t['scopes']):<18} {state}")


@app.command("revoke")
def revoke(name_or_id: Annotated[str, typer.Argument(help="the token's name or id")]) -> None:
    """Revoke a token: requests with it get 401 from now on."""
    prepare_database()
    from perfbisect.service.auth import service as auth  # the database, only for the commands that open it
    from perfbisect.service.db import session_scope

    try:
        with session_scope() as session:
            row = auth.revoke(session, name_or_id)
            message = f"token {row.id} {row.name!r} is revoked"
    except PerfbisectError as exc:
        fail(exc.message)
    console().print(message)


def local_token_path() -> Path:
    from perfbisect.service.settings import get_settings

    return get_settings().home / LOCAL_TOKEN_FILE


def _write_private(path: Path, token: str) -> None:
    """Write `token` to `path` readable by its owner only, never visible with wider modes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.replace(tmp, path)


def read_local_token() -> str | None:
    path = local_token_path()
    if not path.is_file():
        return None
    if path.stat().st_mode & 0o077:  # made readable by others since: take it back
        path.chmod(0o600)
    return path.read_text().strip() or None


def local_principal() -> Principal:
    """The CLI's admin principal on the configured database: the token in PERFBISECT_HOME when
    the database knows it, else a new admin token written there (0600)."""
    from perfbisect.service.auth.principal import Scope

    from perfbisect.service.auth import service as auth  # the database, only for the commands that open it
    from perfbisect.service.db import session_scope

    token = read_local_token()
    with session_scope() as session:
        if token:
            try:
                return auth.authenticate(session, token)
            except Unauthenticated:
                pass  # revoked, or another database: make a new one
        taken = {t.name for t in auth.list_tokens(session)}
        name = LOCAL_TOKEN_NAME if LOCAL_TOKEN_NAME not in taken else f"{LOCAL_TOKEN_NAME}-{secrets.token_hex(3)}"
        row, token = auth.create_token(session, name, [Scope.admin])
        principal = auth.principal_of(row)
    _write_private(local_token_path(), token)
    return principal


def api_token() -> str | None:
    """The token `--api` calls send: PERFBISECT_TOKEN, else the local CLI token, if any."""
    return os.environ.get("PERFBISECT_TOKEN") or read_local_token()
