"""The data directory kept safe (issue 50): `loopgrade backup` while grading and `restore` into a
fresh directory, the copy taken before an upgrade, and one sentence at start for each operator
mistake. On SQLite, or PostgreSQL under LOOPGRADE_TEST_DATABASE_URL (pg_dump, pg_restore)."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from app.access import load_secret_key
from app.cli_support import CommandFailed, check_tool_keys
from app.data_dir import hold_serve_lock, sqlite_path
from app.db import SessionFactory, create_db_engine, create_session_factory
from app.integrations.keys import KEK_FILE_NAME, key_sealing, rotate_tool_key
from app.main import create_app
from app.models import Submission
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE, loopgrade, loopgrade_process
from tests.app.people import PASSWORD, graded, make_course, make_user, sign_in
from tests.app.test_migrations_populated import build_populated
from tests.conftest import TEST_DATABASE_URL
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread
from tests.services import create_database, drop_database


@pytest.fixture
def restore_database_url() -> Iterator[dict[str, str]]:
    """The environment of a restore: with PostgreSQL, a new empty database to restore into."""
    if not TEST_DATABASE_URL:
        yield {}
        return
    name = f"restore_{uuid.uuid4().hex[:12]}"
    url = create_database(TEST_DATABASE_URL, name)
    yield {"LOOPGRADE_DATABASE_URL": url}
    drop_database(TEST_DATABASE_URL, name)


def test_backup_while_grading_then_restore_into_a_fresh_directory(
    settings: Settings,
    sessions: SessionFactory,
    auth: dict[str, str],
    client: httpx.Client,
    tmp_path: Path,
    restore_database_url: dict[str, str],
) -> None:
    make_user(sessions, "teacher@example.org")
    learners = [f"learner{n}@example.org" for n in range(3)]
    user_ids = [make_user(sessions, email) for email in learners]
    course_id = make_course(sessions, "teacher@example.org", *learners)
    scores = {
        graded(sessions, user_id=user_id, course_id=course_id, score=2.5 * (n + 1)): 2.5 * (n + 1)
        for n, user_id in enumerate(user_ids)
    }
    with sessions.begin() as session:
        rotate_tool_key(session, key_sealing(settings))  # a sealed LTI key, its KEK file made
    # Submissions in flight while the backup is taken.
    in_flight = [
        client.post(
            "/api/v1/submissions",
            headers=auth,
            json={"exercise": EXERCISE, "learner": f"api-{n}", "code": CORRECT_CODE},
        ).json()["id"]
        for n in range(3)
    ]

    backup = tmp_path / "backup"
    made = loopgrade("backup", str(backup), data_dir=settings.data_dir)
    assert made.returncode == 0, made.stderr
    assert "Backed up the database" in made.stdout
    for name in ("secret_key", KEK_FILE_NAME, "backup.json"):
        assert (backup / name).is_file()

    restored_dir = tmp_path / "restored"
    done = loopgrade("restore", str(backup), data_dir=restored_dir, env=restore_database_url)
    assert done.returncode == 0, done.stderr
    for name in ("secret_key", KEK_FILE_NAME):
        assert (restored_dir / name).read_bytes() == (settings.data_dir / name).read_bytes()

    restored = Settings(data_dir=restored_dir, sandbox_pool_size=0)
    if restore_database_url:
        restored.database_url = restore_database_url["LOOPGRADE_DATABASE_URL"]
    engine = create_db_engine(restored.database_url)
    try:
        with create_session_factory(engine)() as session:
            for submission_id, score in scores.items():
                row = session.get(Submission, submission_id)
                assert row is not None and row.score == score
            for submission_id in in_flight:  # as they were: queued, running or graded
                assert session.get(Submission, submission_id) is not None
        with (
            app_in_thread(create_app(restored)) as url,
            httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as restored_client,
        ):
            for email in learners:
                restored_client.cookies.clear()
                assert sign_in(restored_client, email, PASSWORD).status_code == 303
            restored_client.cookies.clear()
            assert sign_in(restored_client, learners[0], "not the password").status_code != 303
            # What was in flight is graded on the restored server (the API key came along).
            for submission_id in in_flight:
                wait_for_status(restored_client, submission_id, auth, "graded")
    finally:
        engine.dispose()


def wait_for_status(
    client: httpx.Client, submission_id: str, auth: dict[str, str], status: str
) -> None:
    from tests.app.conftest import wait_until_finished

    body = wait_until_finished(
        client, f"/api/v1/submissions/{submission_id}", auth, statuses=(status, "error")
    )
    assert body["status"] == status


def test_restore_refuses_a_partial_backup_or_a_used_directory(
    settings: Settings, tmp_path: Path, restore_database_url: dict[str, str]
) -> None:
    load_secret_key(settings)  # the files a server makes at its first start
    key_sealing(settings)
    backup = tmp_path / "backup"
    assert loopgrade("backup", str(backup), data_dir=settings.data_dir).returncode == 0
    again = loopgrade("backup", str(backup), data_dir=settings.data_dir)
    assert again.returncode == 1
    assert "already exists and is not an empty folder" in again.stderr

    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    refused = loopgrade("restore", str(backup), data_dir=used, env=restore_database_url)
    assert refused.returncode == 1
    assert f"the data directory {used} is not empty (it holds notes.txt)" in refused.stderr

    (backup / "secret_key").unlink()
    fresh = tmp_path / "fresh"
    partial = loopgrade("restore", str(backup), data_dir=fresh, env=restore_database_url)
    assert partial.returncode == 1
    assert "is incomplete: secret_key is missing" in partial.stderr
    assert not fresh.exists() or not any(fresh.iterdir())


def test_a_missing_key_encryption_key_file_is_refused_and_not_replaced(
    settings: Settings, sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        rotate_tool_key(session, key_sealing(settings))
    (settings.data_dir / KEK_FILE_NAME).unlink()
    with pytest.raises(CommandFailed, match="is missing but the database holds the tool's LTI"):
        check_tool_keys(settings)
    assert not (settings.data_dir / KEK_FILE_NAME).exists()


def test_a_lost_secret_key_warns_that_everyone_is_signed_out(
    settings: Settings, sessions: SessionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    make_user(sessions, "someone@example.org")
    assert not (settings.data_dir / "secret_key").exists()
    with caplog.at_level(logging.WARNING, logger="loopgrade"):
        check_tool_keys(settings)
    assert "everyone signed in is signed out" in caplog.text


def test_a_second_server_on_one_sqlite_directory_is_refused(settings: Settings) -> None:
    if sqlite_path(settings) is None:
        pytest.skip("many servers share a PostgreSQL database")
    lock = hold_serve_lock(settings)  # the first server's
    assert lock is not None
    try:
        second = loopgrade_process("serve", "--port", "0", data_dir=settings.data_dir)
    finally:
        lock.close()
    assert second.returncode == 1
    assert "another loopgrade server" in second.stderr
    assert "is serving" in second.stderr


def test_migrate_copies_an_sqlite_database_before_upgrading_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir)
    database = sqlite_path(settings)
    if database is None:
        pytest.skip("the copy beside the database is SQLite's; PostgreSQL: loopgrade backup")
    engine = create_db_engine(settings.database_url)
    try:
        build_populated(engine, settings.database_url, until="0020")
    finally:
        engine.dispose()
    done = loopgrade("migrate", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    copy = data_dir / "loopgrade-at-0020.db"
    with closing(sqlite3.connect(copy)) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone() == ("0020",)
        assert connection.execute("SELECT count(*) FROM submissions").fetchone()[0] > 0


def test_a_failed_upgrade_is_one_sentence_naming_the_copy(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir)
    if sqlite_path(settings) is None:
        pytest.skip("the copy beside the database is SQLite's")
    engine = create_db_engine(settings.database_url)
    try:
        build_populated(engine, settings.database_url, until="0020")
        with engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE hint_opens (id INTEGER PRIMARY KEY)")
    finally:
        engine.dispose()
    failed = loopgrade("migrate", data_dir=data_dir)
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    [sentence] = [line for line in failed.stderr.splitlines() if line.startswith("loopgrade:")]
    assert "it is left whole at migration 0020" in sentence
    assert str(data_dir / "loopgrade-at-0020.db") in sentence

    (data_dir / "loopgrade-at-0020.db").unlink()
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE hint_opens")
    engine.dispose()
    skipped = loopgrade("migrate", "--no-copy-before-upgrade", data_dir=data_dir)
    assert skipped.returncode == 0, skipped.stderr
    assert not list(data_dir.glob("loopgrade-at-*"))
