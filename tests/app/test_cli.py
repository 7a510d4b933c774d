"""The `loopgrade` command: in this process as it runs in its own (tests/app/conftest.py), serve
in a process of its own."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest
from sqlalchemy import inspect, select

from app.db import create_db_engine, create_session_factory, head_revision
from app.models import ApiKey, User
from app.settings import Settings
from graders.exercises import list_exercises
from sandbox.capacity import default_pool_size, usable_cores
from tests.app.conftest import EXERCISE, MISSING_ZERO_GRAD_CODE, loopgrade, loopgrade_process
from tests.servers import HTTP_TIMEOUT_SECONDS


def test_migrate_creates_the_schema_and_is_repeatable(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    for _ in range(2):
        result = loopgrade("migrate", "--data-dir", str(data_dir))
        assert result.returncode == 0, result.stderr
    assert head_revision() in result.stderr
    engine = create_db_engine(Settings(data_dir=data_dir).database_url)
    assert {"submissions", "api_keys", "alembic_version"} <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_keys_create_prints_a_working_key_and_stores_only_its_hash(
    tmp_path: Path, server_url: str, settings: Settings
) -> None:
    # The data dir from the environment, as an operator's shell would set it.
    result = loopgrade("keys", "create", "canvas-prod", data_dir=settings.data_dir)
    assert result.returncode == 0, result.stderr
    key = result.stdout.splitlines()[-1]
    assert key == result.stdout.strip()
    assert len(key) > 30

    engine = create_db_engine(settings.database_url)
    with create_session_factory(engine)() as session:
        stored = session.scalars(select(ApiKey).where(ApiKey.name == "canvas-prod")).one()
        assert stored.key_hash == hashlib.sha256(key.encode()).hexdigest()
    engine.dispose()
    database_bytes = b"".join(path.read_bytes() for path in settings.data_dir.glob("loopgrade.db*"))
    assert key.encode() not in database_bytes

    with httpx.Client(base_url=server_url, timeout=HTTP_TIMEOUT_SECONDS) as client:
        accepted = client.get(
            "/api/v1/submissions/no-such-id", headers={"Authorization": f"Bearer {key}"}
        )
        refused = client.get(
            "/api/v1/submissions/no-such-id", headers={"Authorization": f"Bearer {key}x"}
        )
    assert accepted.status_code == 404
    assert refused.status_code == 401


@pytest.mark.no_database
def test_grade_prints_the_report(tmp_path: Path) -> None:
    source = tmp_path / "mine.py"
    source.write_text(MISSING_ZERO_GRAD_CODE)
    result = loopgrade("grade", str(source), "--exercise", EXERCISE)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    summary = re.fullmatch(rf"{EXERCISE}: ([0-9.]+)/([0-9.]+)  missing-zero-grad", lines[0])
    assert summary, lines[0]
    assert float(summary[1]) < float(summary[2])
    check_lines = [line for line in lines if line.startswith(("  PASS", "  FAIL"))]
    assert any(line.startswith("  FAIL") for line in check_lines)
    assert any("weights-match" in line for line in check_lines)
    assert "zero_grad" in result.stdout


@pytest.mark.no_database
def test_grade_refuses_an_unknown_exercise_or_missing_file(tmp_path: Path) -> None:
    source = tmp_path / "mine.py"
    source.write_text(MISSING_ZERO_GRAD_CODE)
    unknown = loopgrade("grade", str(source), "--exercise", "no-such-exercise")
    assert unknown.returncode == 2
    assert EXERCISE in unknown.stderr

    missing = loopgrade("grade", str(tmp_path / "absent.py"), "--exercise", EXERCISE)
    assert missing.returncode == 2
    assert "absent.py" in missing.stderr

    notebook = tmp_path / "broken.ipynb"
    notebook.write_text('{"cells": [')
    broken = loopgrade("grade", str(notebook), "--exercise", EXERCISE)
    assert broken.returncode == 2
    assert "broken.ipynb" in broken.stderr and "notebook" in broken.stderr


@pytest.mark.no_database
def test_serve_refuses_to_start_without_a_sandbox(tmp_path: Path) -> None:
    env = {
        "LOOPGRADE_BWRAP": str(tmp_path / "no-bwrap-here"),
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker-here.sock",  # neither backend
    }
    result = loopgrade_process("serve", "--port", "1", "--data-dir", str(tmp_path), env=env)
    assert result.returncode == 1
    assert "refusing to start" in result.stderr and "bubblewrap" in result.stderr
    assert "Docker engine" in result.stderr
    assert not (tmp_path / "loopgrade.db").exists()


@pytest.mark.no_database
def test_serve_refuses_an_fd_that_is_no_inherited_socket(tmp_path: Path) -> None:
    # fd 99 is open in no child.
    result = loopgrade_process("serve", "--fd", "99", "--data-dir", str(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "--fd 99 is not a socket" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "loopgrade.db").exists()


def test_an_invalid_setting_is_reported_without_a_traceback(tmp_path: Path) -> None:
    result = loopgrade("migrate", data_dir=tmp_path, env={"LOOPGRADE_WORKER_COUNT": "none"})
    assert result.returncode == 2
    assert "LOOPGRADE_" in result.stderr and "worker_count" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.no_database
def test_check_exercises_proves_the_unit_sound() -> None:
    result = loopgrade("check-exercises")
    assert result.returncode == 0, result.stdout + result.stderr
    # One line per exercise, in unit order; indented lines under each are its mutants' report.
    lines = [line for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert [line.split(" (")[0] for line in lines] == [
        f"{exercise.position}. {exercise.id}" for exercise in list_exercises()
    ]
    assert all(line.endswith(": ok") for line in lines)
    assert "0 surviving" in result.stdout and " surviving" in result.stdout


def test_users_create_takes_the_password_from_the_environment_only(tmp_path: Path) -> None:
    created = loopgrade(
        "users",
        "create",
        "Tess@Example.edu",
        "--role",
        "instructor",
        "--name",
        "Tess",
        data_dir=tmp_path,
        env={"LOOPGRADE_PASSWORD": "a good long password"},
    )
    assert created.returncode == 0, created.stderr
    assert "tess@example.edu (instructor" in created.stdout
    engine = create_db_engine(Settings(data_dir=tmp_path).database_url)
    with create_session_factory(engine)() as session:
        user = session.scalars(select(User)).one()
        assert user.password_hash.startswith("$argon2id$")
    engine.dispose()

    # No terminal to prompt on and no LOOPGRADE_PASSWORD: refused, saying what to do.
    refused = loopgrade("users", "create", "x@example.edu", data_dir=tmp_path)
    assert refused.returncode == 1 and "LOOPGRADE_PASSWORD" in refused.stderr
    again = loopgrade(
        "users",
        "create",
        "tess@example.edu",
        data_dir=tmp_path,
        env={"LOOPGRADE_PASSWORD": "a good long password"},
    )
    assert again.returncode == 1 and "already an account" in again.stderr
    short = loopgrade(
        "users", "create", "y@example.edu", data_dir=tmp_path, env={"LOOPGRADE_PASSWORD": "short"}
    )
    assert short.returncode == 1 and "at least 10 characters" in short.stderr


def test_courses_create_prints_the_join_code_last_and_keys_can_name_the_course(
    tmp_path: Path,
) -> None:
    loopgrade(
        "users",
        "create",
        "tess@example.edu",
        "--role",
        "instructor",
        data_dir=tmp_path,
        env={"LOOPGRADE_PASSWORD": "a good long password"},
    )
    created = loopgrade(
        "courses",
        "create",
        "Deep Learning 101",
        "--instructor",
        "tess@example.edu",
        data_dir=tmp_path,
    )
    assert created.returncode == 0, created.stderr
    join_code = created.stdout.splitlines()[-1]
    assert re.fullmatch(r"[A-Z2-9]{8}", join_code)
    assert created.stdout.strip() == join_code  # alone, for $(... | tail -n 1)

    missing = loopgrade(
        "courses", "create", "X", "--instructor", "nobody@example.edu", data_dir=tmp_path
    )
    assert missing.returncode == 1 and "users create" in missing.stderr

    listed = loopgrade("courses", "list", data_dir=tmp_path)
    course_id = listed.stdout.split()[0]
    assert join_code in listed.stdout and "tess@example.edu" in listed.stdout

    for course in (join_code.lower(), course_id):
        key = loopgrade("keys", "create", "canvas", "--course", course, data_dir=tmp_path)
        assert key.returncode == 0, key.stderr
        assert "for course 'Deep Learning 101'" in key.stderr
    unscoped = loopgrade("keys", "create", "legacy", data_dir=tmp_path)
    assert "tied to no course" in unscoped.stderr
    wrong = loopgrade("keys", "create", "x", "--course", "NOPE", data_dir=tmp_path)
    assert wrong.returncode == 1 and "courses list" in wrong.stderr
    engine = create_db_engine(Settings(data_dir=tmp_path).database_url)
    with create_session_factory(engine)() as session:
        scopes = {key.name: key.course_id for key in session.scalars(select(ApiKey))}
    engine.dispose()
    assert scopes["canvas"] == course_id and scopes["legacy"] is None


def test_worker_and_pool_defaults_follow_what_the_machine_carries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cores = usable_cores()
    for name in ("LOOPGRADE_WORKER_COUNT", "LOOPGRADE_SANDBOX_POOL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    warm = Settings()
    assert warm.sandbox_pool_size == default_pool_size()
    assert 1 <= warm.sandbox_pool_size <= cores
    assert warm.worker_count == 2 * warm.sandbox_pool_size  # two workers a slot
    monkeypatch.setenv("LOOPGRADE_SANDBOX_POOL_SIZE", "3")
    assert Settings().worker_count == 6
    monkeypatch.setenv("LOOPGRADE_SANDBOX_POOL_SIZE", "64")
    assert Settings().worker_count == 64  # at most the most an operator may set
    monkeypatch.setenv("LOOPGRADE_WORKER_POOL", "prefork")  # its children run cold
    assert Settings().worker_count == cores
    monkeypatch.delenv("LOOPGRADE_WORKER_POOL")
    monkeypatch.setenv("LOOPGRADE_SANDBOX_POOL_SIZE", "0")
    assert Settings().worker_count == cores  # a cold grade keeps one core busy
    monkeypatch.setenv("LOOPGRADE_WORKER_COUNT", "3")
    assert Settings().worker_count == 3  # what the operator set stands


def test_regrade_refuses_what_it_cannot_regrade_in_one_line(tmp_path: Path) -> None:
    env = {"LOOPGRADE_PASSWORD": "a long enough password"}
    made = loopgrade(
        "users", "create", "tess@example.org", "--role", "instructor", data_dir=tmp_path, env=env
    )
    assert made.returncode == 0, made.stderr
    course = loopgrade(
        "courses", "create", "DL", "--instructor", "tess@example.org", data_dir=tmp_path
    )
    join_code = course.stdout.splitlines()[-1]
    refusals = {
        ("nope", EXERCISE, "tess@example.org"): "no course has the id or join code 'nope'",
        (join_code, EXERCISE, "who@example.org"): "no user has the email 'who@example.org'",
        (join_code, "no-such-exercise", "tess@example.org"): (
            "no exercise has the id 'no-such-exercise'"
        ),
        (join_code, EXERCISE, "tess@example.org"): (
            "every submission is already graded against the current version"
        ),
    }
    for (course_id, exercise, by), reason in refusals.items():
        regrade = loopgrade(
            "regrade", "--course", course_id, "--exercise", exercise, "--by", by,
            "--reason", "grader-updated", data_dir=tmp_path,
        )  # fmt: skip
        assert regrade.returncode == 1, regrade.stderr
        last_line = regrade.stderr.strip().splitlines()[-1]
        assert last_line.startswith("loopgrade: ") and reason in last_line, regrade.stderr
    # The reason has no default, as on the web form: without one argparse says which are known.
    unsaid = loopgrade(
        "regrade", "--course", join_code, "--exercise", EXERCISE, "--by", "tess@example.org",
        data_dir=tmp_path,
    )  # fmt: skip
    assert unsaid.returncode == 2
    assert "the following arguments are required: --reason" in unsaid.stderr
