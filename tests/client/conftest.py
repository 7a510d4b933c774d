"""The client against a real `loopgrade serve`: the wheel built from client/, installed into a
directory of its own, and a server with two learners who each have a personal token."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from app.courses.membership import set_assignment
from app.db import create_db_engine, create_session_factory
from app.models import LatePolicy, ScoringPolicy, SiteRole, utc_now
from app.people.accounts import create_user, find_user_by_email
from app.people.tokens import create_personal_token
from graders.exercises import list_exercises
from tests.app.people import graded, make_course, make_user
from tests.conftest import ScopeDatabase
from tests.servers import REPO, running_server


@dataclass(frozen=True)
class Installed:
    """The client's wheel and where it is installed (`--target`), as pip would for a learner."""

    wheel: Path
    target: Path

    def env(self, config: Path) -> dict[str, str]:
        """An environment that finds the installed client (not the checkout) and `config`."""
        return {
            **os.environ,
            "PYTHONPATH": str(self.target),
            "LOOPGRADE_CLIENT_CONFIG": str(config),
        }


@pytest.fixture(scope="session")
def installed_client(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """`pip wheel ./client` then `pip install` of that wheel: no server package comes along."""
    build = tmp_path_factory.mktemp("client-wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(build),
            str(REPO / "client"),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = build.glob("loopgrade_client-*.whl")
    target = build / "site"
    # --no-deps: httpx is the one dependency, and this venv has it already.
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return Installed(wheel, target)


@dataclass(frozen=True)
class Server:
    url: str
    tokens: dict[str, str]  # a learner's email: their token
    database_url: str


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, scope_database: ScopeDatabase
) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("client-server") / "data"
    data_dir.mkdir()
    with scope_database(data_dir) as database_url:
        sessions = create_session_factory(create_db_engine(database_url))
        tokens = {}
        with sessions.begin() as session:
            for email in ("ben@example.org", "cat@example.org"):
                user = create_user(
                    session,
                    email=email,
                    name=email[:3].title(),
                    password="correct horse battery",
                    site_role=SiteRole.LEARNER,
                )
                _, tokens[email] = create_personal_token(
                    session, user, name="laptop", lifetime_days=30, max_days=365
                )
        # A warm pool of one slot: the module's several submissions then start torch once, in
        # its zygote, not once each in a cold sandbox.
        env = {
            **os.environ,
            "LOOPGRADE_DATABASE_URL": database_url,
            "LOOPGRADE_SANDBOX_POOL_SIZE": "1",
        }
        log_path = data_dir.parent / "server.log"
        with running_server(data_dir, log_path, env) as (_, url):
            yield Server(url, tokens, database_url)


@dataclass(frozen=True)
class CourseOfBen:
    """Ben's course: one exercise whose reference is shown (due yesterday, the course shows it),
    one whose due date is ahead (shown from then on); Ben's submission in it and in practice."""

    id: str
    released: str
    held: str
    submission_in_course: str
    submission_in_practice: str


@pytest.fixture(scope="module")
def course_of_ben(server: Server) -> CourseOfBen:
    sessions = create_session_factory(create_db_engine(server.database_url))
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR, name="Tess")
    course_id = make_course(sessions, "tess@example.org", "ben@example.org")
    released, held = (exercise.id for exercise in list_exercises()[:2])
    with sessions.begin() as session:
        for exercise_id, days in ((released, -1), (held, 1)):
            set_assignment(
                session,
                course_id=course_id,
                exercise_id=exercise_id,
                assigned=True,
                due_at=utc_now() + timedelta(days=days),
                late_policy=LatePolicy.PENALTY,
                late_penalty_percent_per_day=0.0,
                scoring_policy=ScoringPolicy.BEST,
                show_solution_after_due=True,
            )
        ben = find_user_by_email(session, "ben@example.org")
        assert ben is not None
        ben_id = ben.id
    return CourseOfBen(
        course_id,
        released,
        held,
        graded(sessions, user_id=ben_id, course_id=course_id, exercise=released, score=3),
        graded(sessions, user_id=ben_id, course_id=None, exercise=released, score=3),
    )
