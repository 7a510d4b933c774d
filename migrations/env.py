"""Alembic environment. The database URL comes from loopgrade's settings, never from a file."""

from collections.abc import Collection, Mapping
from logging.config import fileConfig
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo
from sqlalchemy import Connection

from app.db import check_foreign_keys, create_migration_engine
from app.settings import Settings
from app.tables import metadata

config = context.config

# `alembic` on the command line configures logging from alembic.ini; `loopgrade` already has.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def database_url() -> str:
    url = config.attributes.get("database_url")
    return str(url) if url else Settings().database_url


def run_migrations_offline() -> None:
    """Print the SQL instead of running it (`alembic upgrade head --sql`)."""
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def check_before_commit(
    ctx: MigrationContext,
    step: MigrationInfo,
    heads: Collection[Any],
    run_args: Mapping[str, Any],
) -> None:
    """Each migration's foreign keys, checked inside its transaction (SQLite: not enforced
    while migrating, app.db.create_migration_engine)."""
    assert ctx.connection is not None
    check_foreign_keys(ctx.connection)


def run_on(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=sqlite,
        # One transaction per migration: a failure rolls back to the last whole revision.
        # SQLite's DDL is transactional too (Alembic assumes not).
        transaction_per_migration=True,
        transactional_ddl=True,
        on_version_apply=check_before_commit,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_migration_engine(database_url())
    try:
        with engine.connect() as connection:
            run_on(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
