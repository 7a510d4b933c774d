"""Helpers for tests of people and courses: accounts, courses and graded rows made directly."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import httpx

from app.courses.membership import create_course, join_course
from app.db import SessionFactory
from app.models import SiteRole, Submission, SubmissionStatus, utc_now
from app.people.accounts import create_user
from tests.app.conftest import EXERCISE

PASSWORD = "correct horse battery"


def make_user(
    sessions: SessionFactory, email: str, role: SiteRole = SiteRole.LEARNER, name: str = ""
) -> str:
    with sessions.begin() as session:
        return create_user(
            session,
            email=email,
            name=name or email.split("@")[0].title(),
            password=PASSWORD,
            site_role=role,
        ).id


def make_course(sessions: SessionFactory, instructor_email: str, *learner_emails: str) -> str:
    """A course taught by the first user, with the others enrolled; returns its id."""
    from app.people.accounts import find_user_by_email

    with sessions.begin() as session:
        instructor = find_user_by_email(session, instructor_email)
        assert instructor is not None
        course = create_course(session, name="Deep Learning 101", instructor=instructor)
        for email in learner_emails:
            learner = find_user_by_email(session, email)
            assert learner is not None
            join_course(session, user=learner, join_code=course.join_code)
        return course.id


def graded(
    sessions: SessionFactory,
    *,
    user_id: str | None,
    course_id: str | None,
    score: float,
    exercise: str = EXERCISE,
    learner: str = "someone@example.org",
    diagnosis: str | None = None,
    created_at: datetime | None = None,
    code: str = "def train_step(model, optimizer, loss_fn, x, y):\n    return 0.0\n",
) -> str:
    """A graded submission row, as a worker would leave it; returns its id."""
    with sessions.begin() as session:
        row = Submission(
            exercise_id=exercise,
            exercise_version="v-test",
            learner=learner,
            code=code,
            status=SubmissionStatus.GRADED,
            attempts=1,
            score=score,
            max_score=10.0,
            diagnosis=diagnosis or ("correct" if score >= 10 else "missing-zero-grad"),
            checks=[],
            feedback="feedback",
            plots=[],
            created_at=created_at or utc_now(),
            graded_at=created_at or utc_now(),
            user_id=user_id,
            course_id=course_id,
        )
        session.add(row)
        session.flush()
        return row.id


def token_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match, "no CSRF token on the page"
    return match[1]


def sign_in(
    client: httpx.Client, email: str, password: str = PASSWORD, **extra: Any
) -> httpx.Response:
    token = token_of(client.get("/sign-in"))
    return client.post(
        "/sign-in", data={"email": email, "password": password, "csrf_token": token}, **extra
    )


def post_form(
    client: httpx.Client, page_path: str, action: str, data: dict[str, str]
) -> httpx.Response:
    """Post a form found on `page_path` (with its CSRF token) to `action`."""
    token = token_of(client.get(page_path))
    return client.post(action, data={**data, "csrf_token": token})
