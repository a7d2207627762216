"""The schema the migrations build is the one the models declare: a model change without its
migration (or the reverse) fails here, not in production."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext


def test_the_migrations_build_the_schema_the_models_declare(migrated_engine) -> None:
    from perfbisect.service.tables import metadata

    with migrated_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []
