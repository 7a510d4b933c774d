"""`loopgrade backup PATH` and `loopgrade restore PATH`: the database and every key file of the
data directory, taken while the server runs, put back into an empty data directory.

A backup is a folder: the database (`loopgrade.db`, by SQLite's online backup API, or
`loopgrade.pgdump`, by `pg_dump --format=custom`), the data directory's key files, and
`backup.json`, which lists each file with its SHA-256 (a restore refuses a folder that does not
match it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from app.cli_support import CommandFailed, build_settings
from app.data_dir import KEY_FILES, copy_sqlite_database, hold_serve_lock, sqlite_path
from app.settings import Settings

AddDataDir = Callable[[argparse.ArgumentParser], None]

MANIFEST = "backup.json"
SQLITE_DUMP = "loopgrade.db"
POSTGRES_DUMP = "loopgrade.pgdump"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def libpq_environment(database_url: str) -> dict[str, str]:
    """pg_dump's and pg_restore's connection, in libpq's variables (a password on their command
    line would be readable by every user of the host)."""
    url = make_url(database_url)
    values = {
        "PGHOST": url.host,
        "PGPORT": str(url.port) if url.port else None,
        "PGUSER": url.username,
        "PGPASSWORD": url.password,
        "PGDATABASE": url.database,
    }
    return {**os.environ, **{name: value for name, value in values.items() if value}}


def postgres_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise CommandFailed(
            f"{name} is not on PATH: install PostgreSQL's client tools (the server's major "
            f"version or newer), or use the commands in docs/operations.md#back-up by hand"
        )
    return found


def run_postgres_tool(arguments: list[str], database_url: str) -> None:
    done = subprocess.run(
        arguments, env=libpq_environment(database_url), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        last_line = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CommandFailed(f"{Path(arguments[0]).name} failed: {last_line}")


def database_revision_of(database_url: str) -> str | None:
    from app.db import create_db_engine, database_revision

    engine = create_db_engine(database_url, pool_size=1, max_overflow=0)
    try:
        return database_revision(engine)
    finally:
        engine.dispose()


def back_up(settings: Settings, target: Path) -> dict[str, Any]:
    """Write the backup folder `target` (new or empty); return its manifest."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise CommandFailed(f"{target} already exists and is not an empty folder: name a new one")
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    database = sqlite_path(settings)
    if database is not None:
        if not database.exists():
            raise CommandFailed(f"there is no database at {database} to back up")
        copy_sqlite_database(database, target / SQLITE_DUMP)
        revision = database_revision_of(f"sqlite:///{target / SQLITE_DUMP}")
        kind = "sqlite"
    else:
        pg_dump = postgres_tool("pg_dump")
        dump = target / POSTGRES_DUMP
        run_postgres_tool(
            [pg_dump, "--format=custom", "--no-owner", f"--file={dump}"], settings.database_url
        )
        dump.chmod(0o600)
        revision = database_revision_of(settings.database_url)
        kind = "postgresql"
    for name in KEY_FILES:
        source = settings.data_dir / name
        if source.exists():
            shutil.copyfile(source, target / name)
            (target / name).chmod(0o600)
    configured = {
        "LOOPGRADE_SECRET_KEY": settings.secret_key,
        "LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS": settings.lti_key_encryption_keys,
    }
    not_included = [name for name, value in configured.items() if value.strip()]
    manifest = {
        "made_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": kind,
        "revision": revision,
        "files": {
            path.name: sha256_of(path) for path in sorted(target.iterdir()) if path.is_file()
        },
        "keys_from_the_environment": not_included,
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(source: Path) -> dict[str, Any]:
    """The backup's manifest, once every file it lists is there unchanged."""
    try:
        manifest: dict[str, Any] = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError):
        raise CommandFailed(
            f"{source} is not a whole loopgrade backup: {MANIFEST} is missing or unreadable"
        ) from None
    for name, digest in manifest["files"].items():
        path = source / name
        if not path.is_file() or sha256_of(path) != digest:
            raise CommandFailed(
                f"the backup {source} is incomplete: {name} is missing or not the file backed up"
            )
    return manifest


def restore(settings: Settings, source: Path) -> dict[str, Any]:
    """Put the backup `source` into the empty data directory (and, with PostgreSQL, the empty
    database) of `settings`; return its manifest."""
    manifest = read_manifest(source)
    database = sqlite_path(settings)
    if (manifest["database"] == "sqlite") != (database is not None):
        raise CommandFailed(
            f"the backup holds a {manifest['database']} database but LOOPGRADE_DATABASE_URL "
            "names the other kind: set it to match the backup"
        )
    data_dir = settings.data_dir
    if data_dir.exists() and any(data_dir.iterdir()):
        held = ", ".join(sorted(path.name for path in data_dir.iterdir())[:5])
        raise CommandFailed(
            f"the data directory {data_dir} is not empty (it holds {held}): restore only into "
            "an empty or new one"
        )
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = hold_serve_lock(settings)  # no server starts on it half restored
    try:
        if database is not None:
            copy_sqlite_database(source / SQLITE_DUMP, database)
        else:
            from app.db import create_db_engine

            engine = create_db_engine(settings.database_url, pool_size=1, max_overflow=0)
            try:
                tables = inspect(engine).get_table_names()
            finally:
                engine.dispose()
            if tables:
                raise CommandFailed(
                    "the database LOOPGRADE_DATABASE_URL names is not empty "
                    f"({len(tables)} tables): restore only into a new, empty database"
                )
            pg_restore = postgres_tool("pg_restore")
            run_postgres_tool(
                [
                    pg_restore,
                    "--no-owner",
                    "--exit-on-error",
                    f"--dbname={make_url(settings.database_url).database}",
                    str(source / POSTGRES_DUMP),
                ],
                settings.database_url,
            )
        for name in KEY_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, data_dir / name)
                (data_dir / name).chmod(0o600)
    finally:
        if lock is not None:
            lock.close()
            (data_dir / "serve.lock").unlink(missing_ok=True)
    return manifest


def cmd_backup(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    manifest = back_up(settings, args.path)
    print(
        f"Backed up the database (migration {manifest['revision']}) and "
        f"{len(manifest['files']) - 1} key files to {args.path}."
    )
    for setting in manifest["keys_from_the_environment"]:
        print(f"Not in the backup: {setting} (from the environment): keep it with the backup.")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    manifest = restore(settings, args.path)
    print(
        f"Restored the backup of {manifest['made_at']} (migration {manifest['revision']}) into "
        f"{settings.data_dir}; 'loopgrade serve' starts on it (and upgrades it if it is older)."
    )
    for setting in manifest["keys_from_the_environment"]:
        print(f"Set {setting} as it was when the backup was made: the backup does not hold it.")
    return 0


def add_backup_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], add_data_dir: AddDataDir
) -> None:
    """backup PATH, restore PATH."""
    backup = commands.add_parser(
        "backup",
        help="copy the database and the data directory's key files into the new folder PATH, "
        "while the server runs",
    )
    backup.add_argument("path", type=Path, metavar="PATH")
    add_data_dir(backup)
    backup.set_defaults(run=cmd_backup)
    restore_command = commands.add_parser(
        "restore",
        help="put the backup in PATH into an empty data directory (and empty database)",
    )
    restore_command.add_argument("path", type=Path, metavar="PATH")
    add_data_dir(restore_command)
    restore_command.set_defaults(run=cmd_restore)
