"""Practice counts in no course, and every page that shows practice work says so; a learner
enrolled in a course that sets the exercise is pointed to the course's exercise, and can take
practice code there, where the course's own rules decide whether it may be submitted."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import httpx
from sqlalchemy import update

from app.db import SessionFactory
from app.models import Assignment, SiteRole, Submission, utc_now
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS


def _browser(client: httpx.Client, email: str | None) -> httpx.Client:
    browser = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    if email is not None:
        assert sign_in(browser, email).status_code == 303
    return browser


def _text(page: httpx.Response) -> str:
    return html.unescape(" ".join(page.text.split()))


def _lee_solved_in_practice(sessions: SessionFactory) -> tuple[str, str, str]:
    """Lee, enrolled in Tess's course, solved the exercise in practice: (Lee, course,
    submission)."""
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    lee = make_user(sessions, "lee@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org")
    practice_id = graded(
        sessions,
        user_id=lee,
        course_id=None,
        score=10,
        learner="lee@example.org",
        code=CORRECT_CODE,
    )
    return lee, course_id, practice_id


def test_every_page_marks_practice_and_points_to_the_course(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    lee_id, course_id, practice_id = _lee_solved_in_practice(sessions)
    course_exercise = f"/courses/{course_id}/exercises/{EXERCISE}"
    lee = _browser(client, "lee@example.org")

    home = _text(lee.get("/"))
    practice = home.split('id="practice-heading"', 1)[1]
    assert "practice counts in no course and no gradebook" in practice
    item = practice.split(f'href="/exercises/{EXERCISE}"', 1)[1].split("</li>", 1)[0]
    assert "Practice:</span>" in item and "Solved" in item.split("Counts in", 1)[0]
    # Beside it, the course where it counts, and that it is not started there.
    assert f'Counts in <a href="{course_exercise}">Deep Learning 101</a>' in item
    assert "Not started" in item.split("Counts in", 1)[1]

    page = _text(lee.get(f"/exercises/{EXERCISE}"))
    assert "Practice</span></h1>" in page
    assert "counts in no course and no gradebook" in page
    steer = page.split('class="panel notice course-steer"', 1)[1].split("</p>", 1)[0]
    assert "You are enrolled in <strong>Deep Learning 101</strong>" in steer
    assert "(not started there)" in steer
    do_it = f"{course_exercise}?code=practice"
    assert f'<a class="button" href="{do_it}">Do it in Deep Learning 101</a>' in steer
    # It opens the course's exercise on Lee's practice code, not on the starter.
    there = lee.get(do_it)
    editor = re.search(r'<textarea id="code"[^>]*>(.*?)</textarea>', there.text, re.S)
    assert editor is not None and html.unescape(editor[1]).strip() == CORRECT_CODE.strip()
    assert "not submitted in Deep Learning 101 yet" in _text(there)

    result = _text(lee.get(f"/submissions/{practice_id}/result"))
    assert "Practice: counts in no course" in result
    assert f'href="{course_exercise}?edit={practice_id}">take this code to Deep Learning 101' in (
        result
    )
    submission = _text(lee.get(f"/submissions/{practice_id}"))
    assert "<h1>Your practice submission</h1>" in submission
    assert "Practice: counts in no course" in submission
    history = _text(lee.get("/history"))
    assert 'Practice</span> <span class="hint">(counts in no course)' in history

    # A course submission is not marked, and offers nothing.
    in_course = graded(sessions, user_id=lee_id, course_id=course_id, score=3)
    course_result = _text(lee.get(f"/submissions/{in_course}/result"))
    assert "Practice" not in course_result and "take this code" not in course_result
    assert "<h1>Your submission</h1>" in _text(lee.get(f"/submissions/{in_course}"))


def test_practice_code_taken_to_the_course_is_submitted_only_under_its_rules(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    _, course_id, practice_id = _lee_solved_in_practice(sessions)
    course_exercise = f"/courses/{course_id}/exercises/{EXERCISE}"
    lee = _browser(client, "lee@example.org")

    # One click: the course's exercise opens on the practice code, not yet submitted there.
    carried = lee.get(f"{course_exercise}?edit={practice_id}")
    assert carried.status_code == 200
    text = _text(carried)
    assert "Your practice code of" in text and "not submitted in Deep Learning 101 yet" in text
    editor = re.search(r'<textarea id="code"[^>]*>(.*?)</textarea>', carried.text, re.S)
    assert editor is not None and html.unescape(editor[1]).strip() == CORRECT_CODE.strip()
    with sessions() as session:
        assert session.query(Submission).filter_by(course_id=course_id).count() == 0

    # The due date has passed and the course takes no late work: taking it there changes nothing.
    with sessions.begin() as session:
        session.execute(
            update(Assignment)
            .where(Assignment.course_id == course_id, Assignment.exercise_id == EXERCISE)
            .values(due_at=utc_now() - timedelta(days=1), late_policy="lock")
        )
    closed = lee.get(f"{course_exercise}?edit={practice_id}")
    assert "accepts no late submissions" in closed.text
    refused = lee.post(course_exercise, data={"code": CORRECT_CODE, "csrf_token": token_of(closed)})
    assert 400 <= refused.status_code < 500
    with sessions() as session:
        assert session.query(Submission).filter_by(course_id=course_id).count() == 0


def test_no_one_is_steered_to_a_course_they_do_not_learn_in(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "out@example.org")
    make_course(sessions, "tess@example.org")
    for email in ("tess@example.org", "out@example.org", None):
        browser = _browser(client, email)
        page = _text(browser.get(f"/exercises/{EXERCISE}"))
        assert "counts in no course" in page, email
        assert "course-steer" not in page and "You are enrolled in" not in page, email
        assert "Counts in <a" not in _text(browser.get("/")), email
    # Another learner's practice code cannot be carried into a course (it is not theirs).
    make_user(sessions, "lee@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org")
    others = graded(sessions, user_id=None, course_id=None, score=10, code="# someone else's\n")
    opened = _browser(client, "lee@example.org").get(
        f"/courses/{course_id}/exercises/{EXERCISE}?edit={others}"
    )
    assert opened.status_code == 200 and "someone else" not in opened.text
    assert "Your practice code of" not in opened.text
