"""What every `loopgrade` command shares: its settings, its database session, its failure.

The command modules (app.cli, app.lti.cli) sit on this one; it imports neither.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from app.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("loopgrade")


def build_settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment; `--data-dir` wins over LOOPGRADE_DATA_DIR."""
    data_dir: Path | None = getattr(args, "data_dir", None)
    settings = Settings(data_dir=data_dir) if data_dir is not None else Settings()
    # The exercises' proofs are kept in the data directory unless LOOPGRADE_PROOF_CACHE_DIR says
    # otherwise: the grader, which reads no settings, finds the place there (graders.proving).
    os.environ.setdefault("LOOPGRADE_PROOF_CACHE_DIR", str(settings.data_dir / "proofs"))
    return settings


def migrate_database(settings: Settings, *, copy_first: bool = False) -> None:
    """Bring the database to this release's newest migration; a failure is one sentence.

    With `copy_first`, an SQLite database about to be upgraded is copied beside itself first
    (app.data_dir.copy_before_upgrade)."""
    from app.data_dir import copy_before_upgrade
    from app.db import (
        MigrationFailed,
        create_db_engine,
        database_revision,
        head_revision,
        known_revision,
        upgrade_database,
    )

    copy = None
    if copy_first:
        engine = create_db_engine(settings.database_url, pool_size=1, max_overflow=0)
        try:
            before = database_revision(engine)
        finally:
            engine.dispose()
        if before != head_revision() and known_revision(before):
            copy = copy_before_upgrade(settings, before)
            if copy is not None:
                log.info("the database at migration %s, before this upgrade: %s", before, copy)
    try:
        revision = upgrade_database(settings.database_url)
    except MigrationFailed as exc:
        kept = f"; the database as it was before this upgrade is in {copy}" if copy else ""
        raise CommandFailed(f"{exc}{kept}") from None
    shown_url = make_url(settings.database_url).render_as_string(hide_password=True)
    log.info("database %s is at migration %s", shown_url, revision)


def check_tool_keys(settings: Settings) -> None:
    """The start-up checks of the database's companions, one sentence each: the tool's LTI keys
    sealed and readable (app.integrations.keys.prepare_tool_keys; a wrong or missing
    key-encryption key stops the start; the app's start-up checks the same, for other ASGI
    servers) and a lost secret key (a warning)."""
    from app.data_dir import warn_if_secret_key_lost
    from app.integrations.keys import ToolKeysUnreadable, prepare_tool_keys, start_up_sealing

    try:
        with database_session(settings) as session:
            prepare_tool_keys(session, start_up_sealing(session, settings))
            warn_if_secret_key_lost(session, settings)
    except ToolKeysUnreadable as exc:
        raise CommandFailed(str(exc)) from None


@contextmanager
def database_session(settings: Settings) -> Iterator[Session]:
    """One transaction on the migrated database, committed when the block ends without error."""
    from app.db import create_db_engine, create_session_factory

    migrate_database(settings)
    engine = create_db_engine(settings.database_url)
    try:
        with create_session_factory(engine).begin() as session:
            yield session
    finally:
        engine.dispose()


class CommandFailed(Exception):
    """Print the message to stderr and exit with status 1."""
