"""The hand-written migrations and the models describe the same schema."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.db import alembic_config, create_db_engine, database_revision, head_revision
from app.main import DatabaseNotMigrated, create_app
from app.settings import Settings
from app.tables import metadata


def test_migrations_match_the_models(settings: Settings) -> None:
    engine = create_db_engine(settings.database_url)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []
    assert database_revision(engine) == head_revision()
    engine.dispose()


def test_migrations_downgrade_and_upgrade_again(settings: Settings) -> None:
    config = alembic_config(settings.database_url)
    command.downgrade(config, "base")
    engine = create_db_engine(settings.database_url)
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    command.upgrade(config, "head")
    assert {
        "submissions",
        "api_keys",
        "users",
        "web_sessions",
        "sign_in_failures",
        "courses",
        "enrolments",
        "assignments",
        "regrades",
        "audit_events",
    } <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_the_app_will_not_start_on_an_unmigrated_database(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(DatabaseNotMigrated, match="loopgrade migrate"):
        asyncio.run(start())
