"""A school's database made at every past revision, with every kind of row, upgraded to the newest
one: every row, score, password hash, key and setting comes through (issue 50).

The database is built one revision at a time from the migration history; at each revision the
rows that revision made possible are added by plain SQL written for its schema
(`migration_fixtures/<revision>.sql`), so every past head is passed with a database full of its
own kinds of rows. It runs on the suite's database: SQLite, or PostgreSQL under
LOOPGRADE_TEST_DATABASE_URL (tests/conftest.py).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from cryptography.fernet import Fernet, MultiFernet
from sqlalchemy import Connection, Engine, inspect, select, text
from sqlalchemy.orm import Session

from app.db import (
    MigrationFailed,
    alembic_config,
    create_db_engine,
    database_revision,
    head_revision,
    upgrade_database,
)
from app.integrations.keys import prepare_tool_keys, private_key
from app.integrations.models import LtiToolKey
from app.models import User
from app.people.accounts import verify_password
from app.settings import Settings
from app.tables import metadata

FIXTURES = Path(__file__).parent / "migration_fixtures"
# Every account in the fixtures has this password (its argon2 hash is in 0002.sql).
PASSWORD = "correct horse battery staple"
# The key-encryption key that sealed 0008's tool key, as <data_dir>/lti_key_encryption_key.
KEK = "kPn3JZqXhH0b2cQb5n6o0tQy0a2cE1pQy5mZ3v8pR1s="

# What a migration removes or renames on purpose.
# 0011: unfinished LTI logins are deleted (they live minutes; the new column has no value).
# 0025: a hint level opened twice at once keeps its first opening.
DELETED_ROWS: dict[str, set[tuple[Any, ...]]] = {
    "lti_login_states": {("state-0005",), ("state-0008",)},
    "hint_opens": {(3,)},
}
# 0008: the tool's private keys are sealed in place, under a new name.
RENAMED_COLUMNS = {("lti_tool_keys", "private_key_pem"): "private_key_sealed"}

Rows = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def revisions_oldest_first() -> list[str]:
    scripts = ScriptDirectory.from_config(alembic_config(""))
    return [script.revision for script in reversed(list(scripts.walk_revisions()))]


def fixture_statements(revision: str) -> list[str]:
    sql = (FIXTURES / f"{revision}.sql").read_text()
    sql = "\n".join(line for line in sql.splitlines() if not line.startswith("-- "))
    return [statement for statement in re.split(r";\s*\n", sql) if statement.strip()]


def every_row(connection: Connection, tables: set[str]) -> Rows:
    """Each of `tables`' rows by primary key, as the driver returns them."""
    rows: Rows = {}
    inspector = inspect(connection)
    for table in tables:
        key = inspector.get_pk_constraint(table)["constrained_columns"]
        # Columns named: psycopg's prepared `SELECT *` would not survive the table changing.
        columns = ", ".join(c["name"] for c in inspector.get_columns(table))
        result = connection.execute(text(f"SELECT {columns} FROM {table}")).mappings()
        rows[table] = {tuple(row[column] for column in key): dict(row) for row in result}
    return rows


def build_populated(engine: Engine, database_url: str, *, until: str) -> Rows:
    """The database at `until`, migrated one revision at a time with each revision's rows
    added; returns every row as it was when last written."""
    config = alembic_config(database_url)
    expected: Rows = {}
    for revision in revisions_oldest_first():
        command.upgrade(config, revision)
        statements = fixture_statements(revision)
        written = {re.findall(r"^(?:INSERT INTO|UPDATE) (\w+)", s)[0] for s in statements}
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement)
            for table, rows in every_row(connection, written).items():
                expected.setdefault(table, {}).update(rows)
        if revision == until:
            break
    return expected


def fixture_hash() -> str:
    match = re.search(r"'(\$argon2[^']+)'", (FIXTURES / "0002.sql").read_text())
    assert match is not None
    return match.group(1)


def assert_every_row_kept(engine: Engine, expected: Rows) -> None:
    with engine.connect() as connection:
        found = every_row(connection, set(expected))
    for table, rows in expected.items():
        for key, row in rows.items():
            if key in DELETED_ROWS.get(table, set()):
                assert key not in found[table]
                continue
            assert key in found[table], f"{table} row {key} was lost"
            now = found[table][key]
            for column, value in row.items():
                column = RENAMED_COLUMNS.get((table, column), column)
                if (table, column) == ("lti_tool_keys", "private_key_sealed"):
                    continue  # sealed at start-up: checked by unsealing below
                assert now[column] == value, f"{table} row {key}: {column} changed"


def assert_the_school_works(engine: Engine) -> None:
    """What the rows mean, read through this release's code."""
    with Session(engine) as session:
        for mapper in metadata_mappers():
            session.scalars(select(mapper)).all()  # every row loads (enums, JSON, times)
        users = session.scalars(select(User)).all()
        assert len(users) == 5
        for user in users:
            assert user.password_hash == fixture_hash()
            assert verify_password(user.password_hash, PASSWORD)
        sealing = MultiFernet([Fernet(KEK)])
        prepare_tool_keys(session, sealing)
        keys = {key.kid: key for key in session.scalars(select(LtiToolKey))}
        assert set(keys) == {"kid-plain-0005", "kid-sealed-0008"}
        for key in keys.values():
            assert private_key(key, sealing).as_dict(private=True)["d"]
        session.rollback()


def metadata_mappers() -> list[type[Any]]:
    from app.models import Base

    tables = set(metadata.tables)
    return [
        mapper.class_
        for mapper in Base.registry.mappers
        if getattr(mapper.local_table, "name", None) in tables
    ]


def test_every_revision_has_its_rows() -> None:
    """A new migration comes with the rows it makes possible (an empty file says why none)."""
    missing = [r for r in revisions_oldest_first() if not (FIXTURES / f"{r}.sql").is_file()]
    assert missing == [], f"add tests/app/migration_fixtures/<revision>.sql for {missing}"


@pytest.mark.parametrize("made_at", ["0012", "0020", "head"])
def test_a_populated_database_upgrades_whole(tmp_path: Path, made_at: str) -> None:
    """Made at 0012 and 0020 (the reported failures: a table rebuilt while others' rows point at
    it) and at every revision on the way to the newest."""
    database_url = Settings(data_dir=tmp_path).database_url
    engine = create_db_engine(database_url)
    try:
        expected = build_populated(engine, database_url, until=made_at)
        upgrade_database(database_url)
        assert database_revision(engine) == head_revision()
        assert_every_row_kept(engine, expected)
        assert_the_school_works(engine)
    finally:
        engine.dispose()


def test_a_failed_migration_leaves_the_last_whole_revision(tmp_path: Path) -> None:
    """A migration that fails half way rolls back to the revision before it; one sentence."""
    database_url = Settings(data_dir=tmp_path).database_url
    engine = create_db_engine(database_url)
    try:
        build_populated(engine, database_url, until="0020")
        with engine.begin() as connection:
            # 0021 adds hint_opens; a table of that name already there makes it fail after
            # it has rebuilt courses.
            connection.exec_driver_sql("CREATE TABLE hint_opens (id INTEGER PRIMARY KEY)")
        with pytest.raises(MigrationFailed) as failure:
            upgrade_database(database_url)
        assert "left whole at migration 0020" in str(failure.value)
        assert "\n" not in str(failure.value)
        assert database_revision(engine) == "0020"
        columns = {c["name"] for c in inspect(engine).get_columns("courses")}
        assert "hint_unlock_attempts" not in columns
        with engine.begin() as connection:
            connection.exec_driver_sql("DROP TABLE hint_opens")
        upgrade_database(database_url)
        assert database_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_a_database_from_a_newer_release_is_refused_in_one_sentence(tmp_path: Path) -> None:
    database_url = Settings(data_dir=tmp_path).database_url
    upgrade_database(database_url)
    engine = create_db_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
        with pytest.raises(MigrationFailed, match="at migration 9999, which this release"):
            upgrade_database(database_url)
    finally:
        engine.dispose()


def test_sqlite_foreign_keys_are_checked_before_a_migration_commits(tmp_path: Path) -> None:
    """Foreign keys are off while SQLite migrates; a row left pointing nowhere fails the
    migration (here one written before it, by hand)."""
    database_url = Settings(data_dir=tmp_path).database_url
    if not database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL enforces foreign keys while it migrates")
    engine = create_db_engine(database_url)
    try:
        build_populated(engine, database_url, until="0022")
        with sqlite3.connect(tmp_path / "loopgrade.db") as connection:  # foreign keys off
            connection.execute("UPDATE enrolments SET user_id = 'nobody' WHERE id = 'enrol-leo'")
        with pytest.raises(MigrationFailed, match="1 rows would point at rows that do not exist"):
            upgrade_database(database_url)
        assert database_revision(engine) == "0022"
    finally:
        engine.dispose()


def test_a_populated_database_downgrades_to_an_older_release(tmp_path: Path) -> None:
    """Back to 0010 (the head of d686a88): what the later migrations added goes with them, the
    rows that were there before stay (docs/operations.md#upgrade)."""
    database_url = Settings(data_dir=tmp_path).database_url
    engine = create_db_engine(database_url)
    try:
        expected = build_populated(engine, database_url, until="head")
        command.downgrade(alembic_config(database_url), "0010")
        assert database_revision(engine) == "0010"
        with engine.connect() as connection:
            found = every_row(connection, {"users", "submissions", "courses", "assignments"})
        assert {key[0] for key in found["users"]} == {"user-admin", "user-teacher"} | {
            f"user-learner-{n}" for n in (1, 2, 3)
        }
        assert all(row["password_hash"] == fixture_hash() for row in found["users"].values())
        for key, row in found["submissions"].items():
            old = expected["submissions"][key]
            assert (row["score"], row["override_score"]) == (old["score"], old["override_score"])
        assert len(found["submissions"]) == len(expected["submissions"])
        # And up again (what the downgrade dropped stays dropped: a token's submissions forget it).
        upgrade_database(database_url)
        assert database_revision(engine) == head_revision()
    finally:
        engine.dispose()
