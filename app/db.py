"""Database engine and sessions. Requests and jobs own the transaction; domain code only flushes.

A request's session is committed by `RequestTransaction` once, when the response starts: a
response under 400 commits, an error (a 4xx or 5xx answer, or an exception) rolls back. A
worker task opens `sessions.begin()`, which does the same for its block. What must follow a
commit (handing a submission to a worker, waking the outbox) is done by `on_commit` hooks on
the session factory, so no route places it by hand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi import Depends, Request
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SessionFactory = sessionmaker[Session]

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# For the commands and scripts. The server sizes its two engines itself (app.main): the
# requests' pool from admission control (app.admission.RequestCapacity), the grading's from
# its threads, so that neither ever waits for the other's connections.
POOL_SIZE = 10
POOL_MAX_OVERFLOW = 50
# libpq waits forever by default for a server that takes the connection and never answers, or
# for a host that drops packets instead of refusing them: a request would hang instead of
# getting its 503. Bounded here unless the database URL sets its own.
POSTGRES_CONNECTION_DEFAULTS = {
    "connect_timeout": 10,  # seconds, for the whole connection start-up
    "keepalives": 1,  # an idle pooled connection to a vanished host is found dead
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # ms: data left unacknowledged that long ends the connection
}


def create_db_engine(
    database_url: str,
    *,
    busy_timeout_seconds: float = 10.0,
    pool_size: int = POOL_SIZE,
    max_overflow: int = POOL_MAX_OVERFLOW,
) -> Engine:
    """An engine for `database_url`; SQLite gets WAL, a busy timeout and foreign keys."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        defaults = {k: v for k, v in POSTGRES_CONNECTION_DEFAULTS.items() if k not in url.query}
        return create_engine(
            url,
            connect_args=defaults,
            pool_pre_ping=True,
            pool_size=pool_size,
            max_overflow=max_overflow,
        )

    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"timeout": busy_timeout_seconds},
        pool_size=pool_size,
        max_overflow=max_overflow,
    )
    busy_timeout_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _configure_sqlite(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        # WAL lets the pages read while a worker writes a result.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


def create_session_factory(engine: Engine) -> SessionFactory:
    """Sessions whose objects stay readable after commit (routes answer from them)."""
    return sessionmaker(engine, expire_on_commit=False)


def on_commit(sessions: SessionFactory, info_key: str, action: Callable[[Any], None]) -> None:
    """Once a transaction of `sessions` commits, `action(value)` with what it left under
    `session.info[info_key]` (if anything); a rollback drops it.

    Only the transaction's own commit or rollback counts. SQLAlchemy sends `after_commit` and
    `after_rollback` for a savepoint (`begin_nested`) too, but a released savepoint is not a
    commit: on PostgreSQL its rows stay invisible to every other connection until the
    transaction commits (a worker handed a submission then found no row to claim, and the
    submission waited for the sweep); and a savepoint rolled back leaves the rest of the
    transaction, and what it recorded, to commit.
    """

    @event.listens_for(sessions, "after_commit")
    def _committed(session: Session) -> None:
        if not session.in_nested_transaction() and info_key in session.info:
            action(session.info.pop(info_key))

    @event.listens_for(sessions, "after_rollback")
    def _rolled_back(session: Session) -> None:
        if not session.in_nested_transaction():
            session.info.pop(info_key, None)


# session.info key: this transaction's writes stand even if the request is answered with an error.
_KEEP_ON_ERROR = "keep_on_error_response"


def keep_on_error_response(session: Session) -> None:
    """Commit this request's writes even though it will be answered with an error.

    For a record of the refusal itself (a failed sign-in counts toward the limit).
    """
    session.info[_KEEP_ON_ERROR] = True


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request; `RequestTransaction` commits or rolls it back.

    On the event loop, not in a worker thread (a hop of 0.1-0.3 ms of CPU each way,
    docs/performance.md#few-thread-hops-a-request): making a session does no I/O, nor closing one
    whose transaction has ended. One still open (an exception on its way past) is closed in a
    thread: closing rolls it back.
    """
    sessions: SessionFactory = request.app.state.sessions
    session = sessions()
    request.state.db_session = session
    try:
        yield session
    finally:
        if session.in_transaction():
            await anyio.to_thread.run_sync(session.close)
        else:
            session.close()


class RequestTransaction:
    """The one owner of a request's transaction: commit before the response starts if its
    status is under 400 (or the writes are kept on purpose), roll back otherwise.

    Committing before the first byte is sent means a client told "accepted" was told so only
    after the row is durable; a failed commit becomes the application's 500 instead.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        def request_session() -> Session | None:
            session: Session | None = scope.get("state", {}).get("db_session")
            return session

        async def send_after_commit(message: Message) -> None:
            session = request_session()
            if message["type"] == "http.response.start" and session is not None:
                if message["status"] < 400 or session.info.pop(_KEEP_ON_ERROR, False):
                    await anyio.to_thread.run_sync(session.commit)
                else:
                    await anyio.to_thread.run_sync(session.rollback)
            await send(message)

        try:
            await self.app(scope, receive, send_after_commit)
        except BaseException:
            session = request_session()
            if session is not None:
                await anyio.to_thread.run_sync(session.rollback)
            raise


SessionDep = Annotated[Session, Depends(get_session)]


def alembic_config(database_url: str) -> Config:
    """Alembic's configuration for `database_url`, without alembic.ini."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute: a main option would put the URL through configparser's % syntax.
    config.attributes["database_url"] = database_url
    return config


def head_revision() -> str:
    """The newest migration's revision."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(config).get_current_head() or ""


def create_migration_engine(database_url: str) -> Engine:
    """The engine Alembic migrates with (migrations/env.py).

    On SQLite, two things differ from `create_db_engine`. Foreign keys are off: a batch
    migration rebuilds a table by copying it, dropping it and renaming the copy, and the drop
    fails once another table's rows point at it (the pragma does nothing inside a transaction,
    so it is set when the connection opens); `PRAGMA foreign_key_check` runs before each
    migration commits instead (`check_foreign_keys`). And the migration's DDL runs inside its
    transaction: pysqlite commits by itself before a CREATE or DROP, which would leave a failed
    migration half done; with its own transaction handling off and BEGIN sent here, SQLite
    rolls the whole migration back.
    """
    engine = create_db_engine(database_url, pool_size=1, max_overflow=0)
    if engine.dialect.name != "sqlite":
        return engine

    @event.listens_for(engine, "connect")
    def _migration_connection(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA foreign_keys=OFF")

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        # IMMEDIATE: the write lock now, not at the first write, so a running server's writes
        # wait (busy_timeout) instead of failing the migration half way.
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class ForeignKeysBroken(Exception):
    """A migration left rows pointing at rows that do not exist (SQLite checks them itself)."""


def check_foreign_keys(connection: Connection) -> None:
    """On SQLite, raise unless every foreign key holds (they are not enforced while migrating)."""
    if connection.dialect.name != "sqlite":
        return
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        table, rowid, parent, _ = broken[0]
        raise ForeignKeysBroken(
            f"{len(broken)} rows would point at rows that do not exist (the first: row {rowid} "
            f"of {table} at a missing row of {parent})"
        )


class MigrationFailed(Exception):
    """A migration failed; the message is one sentence for the operator."""


def known_revision(revision: str | None) -> bool:
    """Whether this release's migrations include `revision` (None: an empty database)."""
    if revision is None:
        return True
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return revision in {
        script.revision for script in ScriptDirectory.from_config(config).walk_revisions()
    }


def newer_database_sentence(revision: str) -> str:
    return (
        f"the database is at migration {revision}, which this release of loopgrade does not "
        "know: a newer release has upgraded it; run that release (or restore the backup taken "
        "before that upgrade, docs/operations.md#restore)"
    )


def upgrade_database(database_url: str) -> str:
    """Apply every migration not yet applied (`alembic upgrade head`); return the revision.

    Each migration commits on its own, so a failure leaves the database at the last whole
    revision; it raises `MigrationFailed` with one sentence.
    """
    engine = create_db_engine(database_url, pool_size=1, max_overflow=0)
    try:
        before = database_revision(engine)
    finally:
        engine.dispose()
    if not known_revision(before):
        raise MigrationFailed(newer_database_sentence(str(before)))
    try:
        command.upgrade(alembic_config(database_url), "head")
    except Exception as exc:
        engine = create_db_engine(database_url, pool_size=1, max_overflow=0)
        try:
            reached = database_revision(engine)
        finally:
            engine.dispose()
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MigrationFailed(
            f"upgrading the database failed ({cause}); it is left whole at migration "
            f"{reached or 'none'} and this release will not start on it: fix the cause and "
            "run 'loopgrade migrate' again, or go back to the release you had "
            "(docs/operations.md#upgrade)"
        ) from exc
    return head_revision()


def database_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when no migration was ever applied."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
