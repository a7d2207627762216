"""Run the Alembic migrations from code (`perfbisect db upgrade`, the embedded default, tests)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_REVISION = re.compile(r"""^(down_revision|revision)\s*=\s*['"]([^'"]+)['"]""", re.M)


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        config.attributes["url"] = url
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(url: str | None = None, connection: Connection | None = None, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url, connection), revision)


def heads() -> set[str]:
    """The revisions no other migration revises, read from the files without importing Alembic
    (a merge's tuple of parents is not read: its parents then look like heads, and the check
    below answers False, which only costs a real upgrade)."""
    revisions, revised = set(), set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        for kind, value in _REVISION.findall(path.read_text()):
            (revisions if kind == "revision" else revised).add(value)
    return revisions - revised


def sqlite_at_head(path: Path) -> bool:
    """Whether the SQLite file is migrated to head already (the CLI then skips Alembic, about a
    second on a loaded 2-core machine). False when the file or its version table is missing."""
    if not path.is_file():
        return False
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            current = {row[0] for row in db.execute("SELECT version_num FROM alembic_version")}
    except sqlite3.Error:
        return False
    return current == heads()
