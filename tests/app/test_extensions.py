"""Per-exercise attempt limits and timed attempts, and one learner's extension of them (a later
due date, more attempts, more minutes): set by an instructor on a real server, said before it
is saved, audited, counted by the one counted-score rule, and enforced on the web form, the
learner's REST API (personal token) and an API key's submissions."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import httpx
from sqlalchemy import func, select, update

from app.api_keys import create_api_key
from app.courses.membership import join_course, set_assignment
from app.db import SessionFactory
from app.models import (
    AuditEvent,
    Course,
    ExerciseOpen,
    Extension,
    LatePolicy,
    ScoringPolicy,
    SiteRole,
    User,
    utc_now,
)
from app.people.accounts import find_user_by_email
from app.people.tokens import create_personal_token
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.app.people import graded, make_course, make_user, post_form, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS

TEACHER, LEE = "tess@example.org", "lee@example.org"


def signed_in(client: httpx.Client, email: str) -> httpx.Client:
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(other, email)
    return other


def course_with_lee(sessions: SessionFactory) -> tuple[str, str]:
    make_user(sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess")
    lee = make_user(sessions, LEE, name="Lee")
    return make_course(sessions, TEACHER, LEE), lee


def set_due(
    sessions: SessionFactory, course_id: str, *, hours_from_now: float, late: LatePolicy
) -> None:
    with sessions.begin() as session:
        set_assignment(
            session,
            course_id=course_id,
            exercise_id=EXERCISE,
            assigned=True,
            due_at=utc_now() + timedelta(hours=hours_from_now),
            late_policy=late,
            late_penalty_percent_per_day=50.0,
            scoring_policy=ScoringPolicy.BEST,
        )


def limits_form(
    teacher: httpx.Client, course_id: str, attempts: str = "", minutes: str = ""
) -> httpx.Response:
    """The limits form as the page sends it: every exercise of the course, ours changed."""
    page = teacher.get(f"/courses/{course_id}/extensions")
    exercises = [part.split('"')[0] for part in page.text.split('name="exercise" value="')[1:]]
    assert EXERCISE in exercises
    data = {
        "exercise": exercises,
        "max_attempts": [attempts if e == EXERCISE else "" for e in exercises],
        "time_limit_minutes": [minutes if e == EXERCISE else "" for e in exercises],
    }
    token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    return teacher.post(f"/courses/{course_id}/limits", data={**data, "csrf_token": token})


def extend(
    teacher: httpx.Client, course_id: str, lee: str, *, confirmed: bool, **terms: str
) -> httpx.Response:
    data = {
        "learner": lee,
        "exercise": EXERCISE,
        "due_at": "",
        "extra_attempts": "0",
        "extra_minutes": "0",
        "timezone": "UTC",
        **terms,
        **({"confirmed": "yes"} if confirmed else {}),
    }
    return post_form(
        teacher, f"/courses/{course_id}/extensions", f"/courses/{course_id}/extensions", data
    )


def text_of(response: httpx.Response) -> str:
    """The page's words, without its tags."""
    return html.unescape(" ".join(re.sub(r"<[^>]+>", "", response.text).split()))


def test_a_later_due_date_for_one_learner_is_said_counted_and_shown_to_them(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, lee = course_with_lee(sessions)
    set_due(sessions, course_id, hours_from_now=-2, late=LatePolicy.PENALTY)
    # Lee's 10/10 came an hour after the due date: -50% counts 5.
    graded(
        sessions,
        user_id=lee,
        course_id=course_id,
        score=10,
        created_at=utc_now() - timedelta(hours=1),
    )
    teacher = signed_in(client, TEACHER)
    # The gradebook's row leads to the form, filled in for Lee.
    gradebook = teacher.get(f"/courses/{course_id}/gradebook").text
    assert f"/courses/{course_id}/extensions?learner={lee}" in gradebook
    new_due = (utc_now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")

    asked = extend(teacher, course_id, lee, confirmed=False, due_at=new_due)
    assert asked.status_code == 200
    said = text_of(asked)
    assert f"→ {new_due.replace('T', ' ')} UTC" in said
    assert "The learner's counted score changes from 5 to 10." in said
    with sessions() as session:
        assert session.scalars(select(Extension)).all() == []  # not saved before confirmed

    saved = extend(teacher, course_id, lee, confirmed=True, due_at=new_due)
    assert saved.status_code == 303
    book = text_of(teacher.get(f"/courses/{course_id}/gradebook"))
    assert "late \u221250%" not in book  # the tag of a late cell
    audit = text_of(teacher.get(f"/courses/{course_id}/audit"))
    assert "Tess changed Lee's terms for One training step: zero, backward, step: due " in audit
    assert "; counted score 5 → 10." in audit

    learner = signed_in(client, LEE)
    page = text_of(learner.get(f"/courses/{course_id}/exercises/{EXERCISE}"))
    assert f"Due {new_due.replace('T', ' ')}" in page or "(extended for you)" in page
    assert "(extended for you)" in page
    assert "extended for you" in text_of(learner.get(f"/courses/{course_id}"))

    # The learner's API says their own date too.
    with sessions.begin() as session:
        user = find_user_by_email(session, LEE)
        assert user is not None
        _, secret = create_personal_token(
            session, user, name="laptop", lifetime_days=30, max_days=30
        )
    mine = client.get("/api/v1/me/exercises", headers={"Authorization": f"Bearer {secret}"})
    exercise = next(e for e in mine.json()["courses"][0]["exercises"] if e["id"] == EXERCISE)
    assert exercise["due_extended"] is True
    assert exercise["due_at"].startswith(new_due)


def test_a_locked_exercise_opens_again_for_the_learner_given_a_later_date(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, lee = course_with_lee(sessions)
    set_due(sessions, course_id, hours_from_now=-1, late=LatePolicy.LOCK)
    learner = signed_in(client, LEE)
    page_path = f"/courses/{course_id}/exercises/{EXERCISE}"
    refused = post_form(learner, page_path, page_path, {"code": CORRECT_CODE})
    assert refused.status_code == 403 and "is now closed" in refused.text
    teacher = signed_in(client, TEACHER)
    new_due = (utc_now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert extend(teacher, course_id, lee, confirmed=True, due_at=new_due).status_code == 303
    accepted = post_form(learner, page_path, page_path, {"code": CORRECT_CODE})
    assert accepted.status_code == 303, accepted.text


def test_an_attempt_limit_refuses_before_grading_and_extra_attempts_lift_it(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, lee = course_with_lee(sessions)
    teacher = signed_in(client, TEACHER)
    for bad, words in (("0", "from 1 to 1000"), ("two", "is not a whole number")):
        refused = limits_form(teacher, course_id, attempts=bad)
        assert refused.status_code == 422 and words in refused.text
    assert limits_form(teacher, course_id, attempts="2").status_code == 303
    audit = text_of(teacher.get(f"/courses/{course_id}/audit"))
    assert "Tess set One training step: zero, backward, step: attempts allowed no limit → 2." in (
        audit
    )
    for _ in range(2):
        graded(sessions, user_id=lee, course_id=course_id, score=3)

    learner = signed_in(client, LEE)
    page_path = f"/courses/{course_id}/exercises/{EXERCISE}"
    page = text_of(learner.get(page_path))
    assert "You have made all 2 submissions this exercise allows you." in page
    refused = post_form(learner, page_path, page_path, {"code": CORRECT_CODE})
    assert refused.status_code == 403
    assert "Ask your instructor if you need more attempts." in text_of(refused)
    # In place (the page's script) and the learner's API: 403 with the same words.
    with sessions.begin() as session:
        user = find_user_by_email(session, LEE)
        assert user is not None
        _, secret = create_personal_token(
            session, user, name="laptop", lifetime_days=30, max_days=30
        )
    api = client.post(
        "/api/v1/me/submissions",
        json={"exercise": EXERCISE, "course": course_id, "code": CORRECT_CODE},
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert api.status_code == 403
    assert "You have made all 2 submissions" in api.json()["detail"]

    asked = extend(teacher, course_id, lee, confirmed=False, extra_attempts="1")
    assert "Attempts allowed 2 → 3" in text_of(asked)
    assert extend(teacher, course_id, lee, confirmed=True, extra_attempts="1").status_code == 303
    page = text_of(learner.get(page_path))
    assert "1 of 3 submissions left (extended for you)." in page
    accepted = post_form(learner, page_path, page_path, {"code": CORRECT_CODE})
    assert accepted.status_code == 303, accepted.text
    again = post_form(learner, page_path, page_path, {"code": CORRECT_CODE})
    assert again.status_code == 403


def test_an_api_keys_learner_is_held_to_the_attempt_limit(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, _ = course_with_lee(sessions)
    teacher = signed_in(client, TEACHER)
    assert limits_form(teacher, course_id, attempts="1").status_code == 303
    with sessions.begin() as session:
        _, key = create_api_key(session, name="lms", course_id=course_id)
    body = {"exercise": EXERCISE, "learner": "lms-user-7", "code": CORRECT_CODE}
    headers = {"Authorization": f"Bearer {key}"}
    assert client.post("/api/v1/submissions", json=body, headers=headers).status_code == 202
    refused = client.post("/api/v1/submissions", json=body, headers=headers)
    assert refused.status_code == 403
    assert "You have made all 1 submissions" in refused.json()["detail"]
    # Another learner of the same key has their own attempts.
    other = {**body, "learner": "lms-user-8"}
    assert client.post("/api/v1/submissions", json=other, headers=headers).status_code == 202


def test_a_timed_attempt_runs_from_the_first_open_and_extra_minutes_extend_it(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, lee = course_with_lee(sessions)
    teacher = signed_in(client, TEACHER)
    assert limits_form(teacher, course_id, minutes="30").status_code == 303
    learner = signed_in(client, LEE)
    page_path = f"/courses/{course_id}/exercises/{EXERCISE}"
    page = text_of(learner.get(page_path))
    assert "Timed: your time ends" in page
    with sessions() as session:
        opened_at = session.scalars(select(ExerciseOpen.opened_at)).one()
    ends_at = (opened_at + timedelta(minutes=30)).isoformat()
    assert f'<time datetime="{ends_at}" data-countdown>' in learner.get(page_path).text

    # 31 minutes later (the open moved back): the page says so, and a submission is refused.
    with sessions.begin() as session:
        session.execute(update(ExerciseOpen).values(opened_at=utc_now() - timedelta(minutes=31)))
    page = text_of(learner.get(page_path))
    assert "Your time for this timed exercise ran out" in page
    refused = post_form(learner, page_path, page_path, {"code": CORRECT_CODE})
    assert refused.status_code == 403
    assert "(30 minutes from when you first opened it)" in text_of(refused)

    asked = extend(teacher, course_id, lee, confirmed=False, extra_minutes="10")
    assert "Time limit 30 min → 40 min" in text_of(asked)
    assert extend(teacher, course_id, lee, confirmed=True, extra_minutes="10").status_code == 303
    page = text_of(learner.get(page_path))
    assert "(extended for you)" in page
    accepted = post_form(learner, page_path, page_path, {"code": CORRECT_CODE})
    assert accepted.status_code == 303, accepted.text
    with sessions() as session:
        actions = session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions == ["limits.set", "extension.set"]


def test_a_submission_through_the_api_starts_the_clock_of_a_timed_attempt(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, lee = course_with_lee(sessions)
    teacher = signed_in(client, TEACHER)
    assert limits_form(teacher, course_id, minutes="5").status_code == 303
    with sessions.begin() as session:
        user = find_user_by_email(session, LEE)
        assert user is not None
        _, secret = create_personal_token(
            session, user, name="laptop", lifetime_days=30, max_days=30
        )
    sent = client.post(
        "/api/v1/me/submissions",
        json={"exercise": EXERCISE, "course": course_id, "code": CORRECT_CODE},
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert sent.status_code == 202, sent.text
    with sessions() as session:
        assert session.scalars(select(ExerciseOpen.user_id)).all() == [lee]


def test_extension_form_refuses_what_is_not_a_learner_or_a_number(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, lee = course_with_lee(sessions)
    teacher = signed_in(client, TEACHER)
    for terms, words in (
        ({"learner": "nobody"}, "Not saved. Choose one of the course's learners."),
        ({"extra_attempts": "-1"}, "Extra attempts is a whole number from 0 to 1000."),
        ({"extra_minutes": "lots"}, "is not a whole number"),
        ({"due_at": "next week"}, "is not a date and time"),
        ({"exercise": "no-such"}, "Choose one of the course's exercises."),
    ):
        refused = extend(teacher, course_id, lee, confirmed=True, **terms)
        assert refused.status_code == 422, terms
        assert words in text_of(refused), terms
    # Nothing changes: nothing is saved or logged.
    same = extend(teacher, course_id, lee, confirmed=False)
    assert same.status_code == 303 and "extension-unchanged" in same.headers["location"]
    # A learner may not reach the page.
    learner = signed_in(client, LEE)
    assert learner.get(f"/courses/{course_id}/extensions").status_code in (403, 404)
    with sessions() as session:
        assert session.scalars(select(Extension)).all() == []
        assert session.scalars(select(AuditEvent)).all() == []


def test_an_accommodation_list_gives_many_learners_terms_on_many_exercises(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    """Two learners, two exercises: every pair said first, saved once confirmed, audited, and
    each extended cell marked in the gradebook; bad input saves nothing."""
    course_id, lee = course_with_lee(sessions)
    max_id = make_user(sessions, "max@example.org", name="Max")
    with sessions.begin() as session:
        course = session.get(Course, course_id)
        user = session.get(User, max_id)
        assert course is not None and user is not None
        join_course(session, user=user, join_code=course.join_code)
    set_due(sessions, course_id, hours_from_now=-2, late=LatePolicy.PENALTY)
    other = "evaluate"
    teacher = signed_in(client, TEACHER)
    page = f"/courses/{course_id}/extensions"
    data: dict[str, str | list[str]] = {
        "learners": [lee, max_id],
        "exercises": [EXERCISE, other],
        "days_later": "3",
        "extra_attempts": "2",
        "extra_minutes": "0",
    }

    def send(**changed: str | list[str]) -> httpx.Response:
        token = token_of(teacher.get(page))
        return teacher.post(f"{page}/many", data={**data, **changed, "csrf_token": token})

    asked = send()
    assert asked.status_code == 200
    said = text_of(asked)
    assert "Give these terms to 2 learners on 2 exercises?" in said
    rows = asked.text.split('class="data compact cards accommodation-changes"', 1)[1]
    assert rows.split("</table>", 1)[0].count('<tr><th scope="row"') == 4
    with sessions() as session:
        assert session.scalars(select(Extension)).all() == []  # not saved before confirmed

    saved = send(confirmed="yes")
    assert saved.status_code == 303 and saved.headers["location"].endswith("done=accommodations")
    with sessions() as session:
        given = session.scalars(select(Extension)).all()
        assert {(e.user_id, e.exercise_id) for e in given} == {
            (who, one) for who in (lee, max_id) for one in (EXERCISE, other)
        }
        assert {e.extra_attempts for e in given} == {2}
        dated = next(e for e in given if e.exercise_id == EXERCISE)
        assert dated.due_at is not None and dated.due_at > utc_now() + timedelta(days=2)
        # Audited where something changed: the dated exercise (an undated one with no attempt
        # limit changes nothing for them, yet their terms are kept for it).
        assert session.scalar(select(func.count()).select_from(AuditEvent)) == 2
    book = teacher.get(f"/courses/{course_id}/gradebook").text
    assert book.count('class="tag tag-extended"') == 4
    assert "their own terms: due " in book and "2 more attempts" in book

    # A learner not in the course, or a number that is none: 422, nothing saved or changed.
    bad_forms: list[dict[str, str | list[str]]] = [
        {"learners": ["nobody"]},
        {"days_later": "many"},
        {"exercises": []},
    ]
    for bad in bad_forms:
        refused = send(**bad, confirmed="yes")
        assert refused.status_code == 422 and "Nothing was saved." in text_of(refused)
    with sessions() as session:
        assert len(session.scalars(select(Extension)).all()) == 4
