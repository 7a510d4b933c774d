"""A hint level opens once: two requests opening it at the same moment store one row and both
find it open (the unique indexes of migration 0025), in a course and in practice, on SQLite and
PostgreSQL; and the migration removes the duplicates stored before it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from app.courses.hints import open_hint
from app.db import SessionFactory, alembic_config, create_db_engine, upgrade_database
from app.models import Course, HintOpen, Submission, User
from app.settings import Settings
from tests.app.people import graded, make_course, make_user
from tests.app.test_migrations_populated import build_populated

BARRIER_TIMEOUT_SECONDS = 60


@pytest.mark.parametrize("in_course", [True, False], ids=["course", "practice"])
def test_two_requests_opening_one_level_at_once_store_one_row(
    sessions: SessionFactory, in_course: bool
) -> None:
    learner_id = make_user(sessions, "ann@example.org")
    make_user(sessions, "tess@example.org")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org") if in_course else None
    submission_id = graded(
        sessions, user_id=learner_id, course_id=course_id, score=3.0, diagnosis="missing-zero-grad"
    )
    # Both have checked that level 1 is not open yet before either stores it.
    both_checked = threading.Barrier(2, timeout=BARRIER_TIMEOUT_SECONDS)

    def open_level_one() -> bool:
        with sessions() as session:

            @event.listens_for(session, "before_flush")
            def wait_for_the_other(*_: object) -> None:
                both_checked.wait()

            submission = session.get_one(Submission, submission_id)
            course = session.get(Course, course_id) if course_id else None
            learner = session.get_one(User, learner_id)
            opened = open_hint(session, submission, course, by=learner, level=1)
            session.commit()
            return opened is not None

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: open_level_one(), range(2)))
    assert sorted(results) == [False, True]  # one stored it; the other found it open
    with sessions() as session:
        assert len(session.scalars(select(HintOpen)).all()) == 1


def test_the_migration_keeps_the_first_of_each_duplicate(tmp_path: Path) -> None:
    database_url = Settings(data_dir=tmp_path).database_url
    engine = create_db_engine(database_url)
    try:
        build_populated(engine, database_url, until="0024")
        columns = "user_id, course_id, exercise_id, submission_id, diagnosis, level, opened_at"
        rows = [
            # 1 and 2 (levels 1 and 2 of course-1) come from the fixtures, and 3, which
            # repeats 1 (0021.sql); 20 repeats 1 too.
            (20, "'course-1'", 1),
            # Practice: 30 and 31 are one opening, 32 another level.
            (30, "NULL", 1),
            (31, "NULL", 1),
            (32, "NULL", 2),
        ]
        with engine.begin() as connection:
            for row_id, course, level in rows:
                connection.exec_driver_sql(
                    f"INSERT INTO hint_opens (id, {columns}) VALUES ({row_id}, 'user-learner-2', "
                    f"{course}, 'fix-the-loop', 'sub-0002-leo-overridden', 'missing-backward', "
                    f"{level}, '2026-10-23 09:00:00.000000')"
                )
        upgrade_database(database_url)
        with Session(engine) as session:
            kept = session.scalars(select(HintOpen.id).order_by(HintOpen.id)).all()
        assert kept == [1, 2, 30, 32]
        # And down again: the indexes go, the rows stay.
        command.downgrade(alembic_config(database_url), "0024")
        with Session(engine) as session:
            assert len(session.scalars(select(HintOpen.id)).all()) == 4
    finally:
        engine.dispose()
