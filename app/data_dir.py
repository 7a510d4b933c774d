"""What the data directory holds, and the checks on it at start: the one server an SQLite
directory takes, the copy of the database taken before an upgrade, the secret key's file.

| file | what |
| --- | --- |
| `loopgrade.db` (and `-wal`, `-shm` beside it) | the SQLite database (none with PostgreSQL) |
| `secret_key` | signs session and CSRF cookies and reset links (unless LOOPGRADE_SECRET_KEY) |
| `lti_key_encryption_key` | seals the tool's LTI private keys (unless LOOPGRADE_LTI_KEY_...) |
| `serve.lock` | held by the server serving an SQLite database |
| `loopgrade-at-<revision>.db` | the database as it was before an upgrade from that revision |
| `proofs/` | the exercises' proofs (graders.proving), unless LOOPGRADE_PROOF_CACHE_DIR |
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import IO

from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.integrations.keys import KEK_FILE_NAME
from app.models import User
from app.settings import Settings

log = logging.getLogger("loopgrade")

DATABASE_FILE = "loopgrade.db"
SECRET_KEY_FILE = "secret_key"  # app.access.load_secret_key makes it
# Every file a data directory needs besides the database, in a backup too.
KEY_FILES = (SECRET_KEY_FILE, KEK_FILE_NAME)
LOCK_FILE = "serve.lock"


class DataDirInUse(Exception):
    """Another server holds this data directory's lock; the message says which."""


def sqlite_path(settings: Settings) -> Path | None:
    """The SQLite database's file, or None for PostgreSQL."""
    url = make_url(settings.database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def hold_serve_lock(settings: Settings) -> IO[str] | None:
    """Take the data directory's lock for as long as the returned file stays open (the process's
    life): a second server on one SQLite database would share its grading and its one writer
    with no word. PostgreSQL takes many servers (docs/deploy.md): no lock then."""
    if sqlite_path(settings) is None:
        return None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    path = settings.data_dir / LOCK_FILE
    lock = path.open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise DataDirInUse(
            f"another loopgrade server (pid {holder}) is serving {settings.data_dir}: stop it "
            "first; one SQLite data directory takes one server (many servers share a "
            "PostgreSQL database, docs/deploy.md)"
        ) from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def copy_sqlite_database(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (its online backup API: writers may go on)."""
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    with closing(sqlite3.connect(source)) as origin, closing(sqlite3.connect(partial)) as copy:
        origin.backup(copy)
    partial.chmod(0o600)
    partial.rename(target)


def copy_before_upgrade(settings: Settings, revision: str | None) -> Path | None:
    """Beside an SQLite database about to be upgraded from `revision`, a copy of it named with
    that revision (`loopgrade-at-0012.db`); an earlier copy from the same revision is kept."""
    database = sqlite_path(settings)
    if database is None or revision is None or not database.exists():
        return None
    target = database.with_name(f"loopgrade-at-{revision}.db")
    if not target.exists():
        copy_sqlite_database(database, target)
    return target


def warn_if_secret_key_lost(session: Session, settings: Settings) -> None:
    """One warning when the secret key's file is gone from a data directory whose database has
    accounts: the new key made in its place signs everyone out."""
    path = settings.data_dir / SECRET_KEY_FILE
    if settings.secret_key or path.exists():
        return
    accounts = session.scalar(select(func.count()).select_from(User)) or 0
    if accounts:
        log.warning(
            "%s is missing while the database has %d accounts: a new key is made, so everyone "
            "signed in is signed out and reset links already sent stop working (restore the "
            "file from your backup and restart to keep them)",
            path,
            accounts,
        )
