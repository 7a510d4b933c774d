"""The exercise page's "Next exercise" link says when the learner can submit there no more, by the
one rule that refuses their submission (`check_open`): the next exercise's lock after its due
date, their attempts used up, or their timed attempt's time run out."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
from sqlalchemy import update

from app.courses.membership import assignments_of
from app.db import SessionFactory
from app.models import Assignment, ExerciseOpen, LatePolicy, SiteRole, utc_now
from tests.app.conftest import CORRECT_CODE
from tests.app.people import graded, make_course, make_user, post_form, sign_in
from tests.servers import HTTP_TIMEOUT_SECONDS

TEACHER, LEE = "tess@example.org", "lee@example.org"
READ_ONLY = ": you can read it, not submit)"


def next_link_words(learner: httpx.Client, page_path: str) -> str:
    """The words of the page's "Next exercise" link, tags out."""
    page = learner.get(page_path)
    assert page.status_code == 200
    link = re.search(r'<div id="next-exercise">(.*?)</div>', page.text, re.S)
    assert link is not None
    return " ".join(re.sub(r"<[^>]+>", "", link[1]).split())


def test_next_exercise_says_it_is_closed_for_each_reason_a_submission_there_is_refused(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess")
    lee = make_user(sessions, LEE, name="Lee")
    course_id = make_course(sessions, TEACHER, LEE)
    with sessions() as session:
        first, following = assignments_of(session, course_id)[:2]
    graded(sessions, user_id=lee, course_id=course_id, exercise=first.id, score=10)
    learner = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(learner, LEE)
    here = f"/courses/{course_id}/exercises/{first.id}"
    there = f"/courses/{course_id}/exercises/{following.id}"
    open_words = f"Next exercise: {following.exercise.title} →"

    def set_following(**values: object) -> None:
        with sessions.begin() as session:
            session.execute(
                update(Assignment)
                .where(Assignment.course_id == course_id, Assignment.exercise_id == following.id)
                .values(**values)
            )

    def refused_there() -> bool:
        sent = post_form(learner, there, there, {"code": CORRECT_CODE})
        return sent.status_code == 403

    assert next_link_words(learner, here) == open_words

    # Every attempt used: the same as the page there says, and a submission there refused.
    set_following(max_attempts=1)
    graded(sessions, user_id=lee, course_id=course_id, exercise=following.id, score=3)
    assert next_link_words(learner, here) == (
        f"Next exercise: {following.exercise.title} (no attempts left{READ_ONLY} →"
    )
    assert refused_there()

    # A timed attempt whose time ran out (opened 31 minutes ago, 30 allowed).
    set_following(max_attempts=None, time_limit_minutes=30)
    assert next_link_words(learner, here) == open_words  # the clock runs from the first open
    learner.get(there)
    with sessions.begin() as session:
        session.execute(update(ExerciseOpen).values(opened_at=utc_now() - timedelta(minutes=31)))
    words = next_link_words(learner, here)
    assert re.fullmatch(
        rf"Next exercise: {re.escape(following.exercise.title)} \(your time ran out at "
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d UTC{re.escape(READ_ONLY)} →",
        words,
    ), words
    assert refused_there()

    # Locked after its due date, which has passed.
    set_following(
        time_limit_minutes=None,
        due_at=utc_now() - timedelta(hours=1),
        late_policy=LatePolicy.LOCK,
    )
    words = next_link_words(learner, here)
    assert re.fullmatch(
        rf"Next exercise: {re.escape(following.exercise.title)} \(closed since "
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d UTC{re.escape(READ_ONLY)} →",
        words,
    ), words
    assert refused_there()

    # A late penalty instead of the lock: open (late, counted with the penalty).
    set_following(late_policy=LatePolicy.PENALTY)
    assert next_link_words(learner, here) == open_words
