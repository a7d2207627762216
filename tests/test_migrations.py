"""The migrations: one chain, its files numbered in apply order, and a database deployed at any
revision that was ever the head (every revision of the chain, each the head when it was written)
upgrades to today's head with the schema the models declare. On a real PostgreSQL database of
its own, created and dropped here, so the session's migrated database is left alone."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, pool, text

from perfbisect.service.migrate import MIGRATIONS_DIR, alembic_config, upgrade
from tests.import_graph import imports_of
from tests.isolation import PG_ADMIN

# The ids databases were stamped with when they were deployed, in apply order: they must stay
# (a renamed id strands every database stamped with it).
DEPLOYED = ("0001", "0002_scale", "0002_gpu", "0002_security", "0002_dashboard", "0002_resilience",
            "0002_loop", "0002_outcomes", "0003_suite_sources", "0004_build_inputs", "0005_history_index",
            "0006_trials_fingerprint_id", "0007_samples_retention", "0011_gate", "0012_attribution",
            "0015_triage", "0014_notifications", "0016_track_confirm", "0016_sbs_side_by_side",
            "0017_scale6", "0018_track2")


def _chain() -> list:
    """The scripts base first; fails on a second head or a merge."""
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1, f"more than one head: {script.get_heads()}"
    return list(reversed(list(script.walk_revisions())))


CHAIN = _chain()
HEAD = CHAIN[-1].revision


def test_the_files_are_numbered_in_apply_order_and_chained() -> None:
    files = sorted(p.name for p in (MIGRATIONS_DIR / "versions").glob("*.py") if p.name != "__init__.py")
    assert [Path(s.path).name for s in CHAIN] == files  # every file is in the one chain, and sorts in its order
    assert [int(name[:4]) for name in files] == list(range(1, len(files) + 1)), files
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.py", name) for name in files), files
    assert all(s.down_revision == (p.revision if p else None) for p, s in zip([None, *CHAIN], CHAIN))


def test_the_deployed_revision_ids_are_kept_in_their_order() -> None:
    assert tuple(s.revision for s in CHAIN[: len(DEPLOYED)]) == DEPLOYED


def test_no_migration_imports_the_application() -> None:
    """A migration carries its own copy of what it needs, so it never changes when the
    application's code does; only env.py reads the settings and the tables."""
    versions = MIGRATIONS_DIR / "versions"
    imported = {(imp.path.name, imp.target) for path in versions.glob("*.py") for imp in imports_of(path, frozenset())
                if imp.target.split(".")[0] == "perfbisect"}
    assert imported == set()
    env = {imp.target for imp in imports_of(MIGRATIONS_DIR / "env.py", frozenset()) if imp.target.startswith("perfbisect")}
    assert env == {"perfbisect.service.settings", "perfbisect.service.tables"}


@pytest.fixture(scope="module")
def scratch_url() -> Iterator[str]:
    """A database of this module's own, dropped at the end."""
    base = os.environ.get("PERFBISECT_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    name = f"{base.rsplit('/', 1)[1]}_migrations"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://{base.split('://', 1)[1].rsplit('/', 1)[0]}/{name}"
    try:
        yield url
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def scratch(scratch_url: str) -> Iterator[Engine]:
    """The scratch database with an empty schema."""
    engine = create_engine(scratch_url, poolclass=pool.NullPool)
    _reset(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _version(conn: Connection) -> str:
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()


def _shape(conn: Connection) -> dict[str, list]:
    """The schema as PostgreSQL has it: columns, indexes, constraints."""
    queries = {
        "columns": "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable, column_default "
                   "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2",
        "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2",
        "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
                       "WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2",
    }
    return {name: [tuple(row) for row in conn.execute(text(sql))] for name, sql in queries.items()}


def _assert_the_declared_schema(conn: Connection) -> None:
    from perfbisect.service.tables import metadata

    assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata) == []


def _reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))


def test_a_database_at_any_historical_head_upgrades_to_head(scratch: Engine) -> None:
    """Each revision was the head once, and databases were deployed at it. The database stands
    at that revision (committed), is upgraded to head in one transaction as Alembic does, and
    must then have the schema of a database built at head in one go; the upgrade is rolled back
    and the next revision is applied, so the chain is walked once."""
    upgrade(url=_url(scratch))
    with scratch.connect() as conn:
        _assert_the_declared_schema(conn)
        expected = _shape(conn)
    _reset(scratch)
    with scratch.connect() as conn:
        for script in CHAIN:
            upgrade(connection=conn, revision=script.revision)
            conn.commit()
            assert _version(conn) == script.revision
            conn.rollback()
            conn.begin()
            upgrade(connection=conn)
            assert (_version(conn), _shape(conn)) == (HEAD, expected), f"upgrading from {script.revision}"
            conn.rollback()


SEED = [
    "INSERT INTO repositories (id, name, url, import_root, env, default_branch, created_at) "
    "VALUES (1, 'r', '/tmp/r', '.', '{}', 'main', now())",
    "INSERT INTO revisions (id, repository_id, sha, subject) VALUES (1, 1, 'a', 'a'), (2, 1, 'b', 'b'), "
    "(3, 1, 'c', 'c'), (4, 1, 'x', 'x')",
    "INSERT INTO cases (id, repository_id, suite, target, name, params) VALUES (1, 1, 'gemm', 'm:f', 'gemm N=1', '{}')",
    # the second range orders b before c, which the first job saw first; a compare's range is its base alone
    "INSERT INTO jobs (id, kind, status, repository_id, spec, revision_shas, progress, created_at) VALUES "
    "(1, 'bisect', 'succeeded', 1, '{}', '[\"a\", \"c\"]', '{}', now()), "
    "(2, 'bisect', 'succeeded', 1, '{}', '[\"a\", \"b\", \"c\"]', '{}', now()), "
    "(3, 'compare', 'succeeded', 1, '{}', '[\"c\", \"x\"]', '{}', now())",
    "INSERT INTO trials (id, job_id, revision_id, status, device_class, attempts, created_at) VALUES "
    "(1, 2, 1, 'ok', 'cpu', 1, now()), (2, 2, 1, 'ok', 'cpu', 1, now()), (3, 2, 2, 'error', 'cpu', 1, now())",
    "INSERT INTO measurements (trial_id, case_id, status, value, control_value, ratio, unit, higher_is_better, "
    "samples) VALUES (1, 1, 'ok', 1.0, 2.0, 2.0, 'ms', false, '{\"target_ms\": [1.0]}'), "
    "(2, 1, 'ok', 3.0, 2.0, 0.5, 'ms', false, '{\"target_ms\": [3.0]}'), "
    "(3, 1, 'ok', 9.0, 2.0, 0.2, 'ms', false, '{}')",
]


def test_the_data_of_a_first_release_database_comes_through_every_migration(scratch: Engine) -> None:
    upgrade(url=_url(scratch), revision="0001")
    with scratch.begin() as conn:
        for statement in SEED:
            conn.execute(text(statement))
    upgrade(url=_url(scratch))
    with scratch.connect() as conn:
        assert _version(conn) == HEAD
        _assert_the_declared_schema(conn)
        positions = dict(conn.execute(text("SELECT sha, position FROM revisions")).all())
        points = conn.execute(text("SELECT revision_id, trials, value, control_value, ratio FROM case_points")).all()
        samples = conn.execute(text("SELECT count(*) FROM measurement_samples")).scalar_one()
    # the ranges merged into one order (a, b, c), not the order they were first seen in (a, c, b);
    # the compare job's head is no history point
    assert positions == {"a": 0, "b": 1, "c": 2, "x": None}
    # the median of revision a's two ok trials; the failed trial at b makes no point
    assert [tuple(p) for p in points] == [(1, 2, 2.0, 2.0, 1.25)]
    assert samples == 3
