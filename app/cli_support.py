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


def migrate_database(settings: Settings) -> None:
    """Bring the database to this release's newest migration; a failure is one sentence."""
    from app.db import MigrationFailed, upgrade_database

    try:
        revision = upgrade_database(settings.database_url)
    except MigrationFailed as exc:
        raise CommandFailed(str(exc)) from None
    shown_url = make_url(settings.database_url).render_as_string(hide_password=True)
    log.info("database %s is at migration %s", shown_url, revision)


def check_tool_keys(settings: Settings) -> None:
    """Seal and check the tool's LTI keys (app.lti.keys.prepare_tool_keys), so that a wrong
    key-encryption key is one sentence on stderr, not a traceback (the app's start-up checks
    the same, for other ASGI servers)."""
    from app.lti.keys import ToolKeysUnreadable, key_sealing, prepare_tool_keys

    try:
        sealing = key_sealing(settings)
        with database_session(settings) as session:
            prepare_tool_keys(session, sealing)
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
