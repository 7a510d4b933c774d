"""The counted-score rule everywhere it is read: an override never lowers a better solve, the
instructor sees what an override does before saving, and late or locked results say why."""

from __future__ import annotations

import csv
import html
import io
import re
from datetime import timedelta

import httpx
from sqlalchemy import select

from app.api_keys import create_api_key
from app.db import SessionFactory
from app.models import Assignment, AuditEvent, SiteRole, Submission, utc_now
from tests.app.conftest import EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.app.test_course_settings import form_of, post
from tests.servers import HTTP_TIMEOUT_SECONDS


def set_policy(sessions: SessionFactory, course_id: str, **values: object) -> None:
    """Set the course's policy for EXERCISE as the settings page would store it."""
    with sessions.begin() as session:
        assignment = session.scalars(
            select(Assignment).where(
                Assignment.course_id == course_id, Assignment.exercise_id == EXERCISE
            )
        ).one()
        for name, value in values.items():
            setattr(assignment, name, value)


def teacher_and_ann(sessions: SessionFactory) -> tuple[str, str]:
    """A course taught by Tess with Ann enrolled: (course id, Ann's user id)."""
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR, name="Tess")
    ann = make_user(sessions, "ann@example.org", name="Ann")
    return make_course(sessions, "tess@example.org", "ann@example.org"), ann


def signed_in(client: httpx.Client, email: str) -> httpx.Client:
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(other, email)
    return other


def text_of(response: httpx.Response) -> str:
    return html.unescape(" ".join(response.text.split()))


def counted_in_gradebook(teacher: httpx.Client, course_id: str) -> list[str]:
    """Each learner's counted score for the exercise, as the gradebook's CSV gives it."""
    path = f"/courses/{course_id}/gradebook.csv?exercise={EXERCISE}"
    rows = list(csv.DictReader(io.StringIO(teacher.get(path).text)))
    (column,) = [
        key for key in rows[0] if key.startswith("One training step") and "counted as" not in key
    ]
    return [row[column] for row in rows]


def test_an_override_of_an_older_attempt_never_lowers_a_solve(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, ann = teacher_and_ann(sessions)
    now = utc_now()
    older = graded(
        sessions, user_id=ann, course_id=course_id, score=3, created_at=now - timedelta(hours=1)
    )
    solve = graded(sessions, user_id=ann, course_id=course_id, score=10, created_at=now)
    teacher = signed_in(client, "tess@example.org")
    assert counted_in_gradebook(teacher, course_id) == ["10"]

    # First the consequence, and nothing saved yet.
    form = {
        "score": "7",
        "reason": "partial credit",
        "csrf_token": token_of(teacher.get(f"/submissions/{older}")),
    }
    preview = teacher.post(f"/submissions/{older}/override", data=form)
    assert preview.status_code == 200
    assert "This does not change the counted score: a better attempt counts (10)." in text_of(
        preview
    )
    with sessions() as session:
        row = session.get(Submission, older)
        assert row is not None and row.override_score is None
        assert session.scalars(select(AuditEvent)).first() is None

    saved = teacher.post(f"/submissions/{older}/override", data={**form, "confirmed": "yes"})
    assert saved.status_code == 303
    assert counted_in_gradebook(teacher, course_id) == ["10"]
    audit = text_of(teacher.get(f"/courses/{course_id}/audit"))
    assert "score 3 → 7: “partial credit”; the counted score stays 10." in audit

    # Ann's page for the exercise still counts 10, and the older result says what it counts.
    ann_client = signed_in(client, "ann@example.org")
    assert "overridden by your instructor to 7/10" in text_of(
        ann_client.get(f"/submissions/{older}")
    )

    # An override of the counted attempt itself changes the counted score, said before saving.
    form = {
        "score": "5",
        "reason": "copied",
        "csrf_token": token_of(teacher.get(f"/submissions/{solve}")),
    }
    preview = teacher.post(f"/submissions/{solve}/override", data=form)
    assert "This changes the counted score from 10 to 7." in text_of(preview)
    assert (
        teacher.post(
            f"/submissions/{solve}/override", data={**form, "confirmed": "yes"}
        ).status_code
        == 303
    )
    assert counted_in_gradebook(teacher, course_id) == ["7"]
    assert "“copied”; counted score 10 → 7." in text_of(teacher.get(f"/courses/{course_id}/audit"))

    # Bad input gets a 4xx with a sentence, before and at the confirmation; nothing changes.
    for data in (
        {"score": "lots", "reason": "x"},
        {"score": "nan", "reason": "x"},
        {"score": "4", "reason": " "},
        {"score": "4", "reason": "x", "confirmed": "yes", "list": "a=b"} | {"score": "11"},
    ):
        token = token_of(teacher.get(f"/submissions/{solve}"))
        refused = teacher.post(f"/submissions/{solve}/override", data={**data, "csrf_token": token})
        assert refused.status_code == 422
        assert "The override was not set:" in refused.text
    assert counted_in_gradebook(teacher, course_id) == ["7"]


def test_late_and_locked_results_say_what_they_count_and_why(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, ann = teacher_and_ann(sessions)
    now = utc_now()
    set_policy(
        sessions, course_id, due_at=now - timedelta(hours=3), late_penalty_percent_per_day=20
    )
    with sessions.begin() as session:
        _, key = create_api_key(session, name="lms", course_id=course_id)
    late = graded(
        sessions,
        user_id=ann,
        course_id=course_id,
        score=10,
        learner="ann",
        created_at=now - timedelta(hours=1),
    )
    expected = (
        "Submitted 2 hours late: 1 started day \N{MULTIPLICATION SIGN} 20% = \N{MINUS SIGN}20% "
        "(a day counts from its first minute); counts 8/10"
    )

    ann_client = signed_in(client, "ann@example.org")
    assert expected in text_of(ann_client.get(f"/submissions/{late}"))
    assert expected in text_of(ann_client.get(f"/submissions/{late}/result"))
    assert expected in text_of(ann_client.get(f"/history?course={course_id}"))
    answer = client.get(
        f"/api/v1/submissions/{late}", headers={"Authorization": f"Bearer {key}"}
    ).json()
    assert (answer["score"], answer["counted_score"], answer["counted_as"]) == (10, 8, "late")
    assert answer["counted_because"] == expected

    teacher = signed_in(client, "tess@example.org")
    book = teacher.get(f"/courses/{course_id}/gradebook")
    assert "late \N{MINUS SIGN}20%" in text_of(book)
    exported = list(
        csv.reader(
            io.StringIO(teacher.get(f"/courses/{course_id}/gradebook.csv?exercise={EXERCISE}").text)
        )
    )
    # One exercise: its score, the totals, then why the score counts.
    assert (exported[1][2], exported[1][-1]) == ("8", "late")

    # Under the lock policy the solve counts 0, and says so: not a plain green 0.
    set_policy(sessions, course_id, late_policy="lock")
    locked = "Submitted 2 hours late: locked, this exercise takes no late work; counts 0/10"
    assert locked in text_of(ann_client.get(f"/submissions/{late}"))
    book = teacher.get(f"/courses/{course_id}/gradebook")
    assert "cell-locked" in book.text
    assert f'locked<span class="visually-hidden"> ({locked})</span>' in text_of(book)
    assert "-100%" not in text_of(book) and "\N{MINUS SIGN}100%" not in text_of(book)
    # Ann's page: the solve after the lock is no green "Solved" beside the 0 it counts.
    course_page = text_of(ann_client.get(f"/courses/{course_id}"))
    assert "Solved after the lock" in course_page and locked in course_page
    exported = list(
        csv.reader(
            io.StringIO(teacher.get(f"/courses/{course_id}/gradebook.csv?exercise={EXERCISE}").text)
        )
    )
    assert (exported[1][2], exported[1][-1]) == ("0", "locked")
    answer = client.get(
        f"/api/v1/submissions/{late}", headers={"Authorization": f"Bearer {key}"}
    ).json()
    assert (answer["counted_score"], answer["counted_as"]) == (0, "locked")


def test_moving_a_due_date_into_the_past_says_how_many_counted_scores_change(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR, name="Tess")
    learners = [make_user(sessions, f"{n}@example.org") for n in ("ann", "ben", "cat")]
    course_id = make_course(
        sessions, "tess@example.org", *(f"{n}@example.org" for n in ("ann", "ben", "cat"))
    )
    now = utc_now()
    for user_id in learners[:2]:  # Ann and Ben solved it an hour ago; Cat never tried
        graded(
            sessions,
            user_id=user_id,
            course_id=course_id,
            score=10,
            created_at=now - timedelta(hours=1),
        )
    teacher = signed_in(client, "tess@example.org")
    path = f"/courses/{course_id}/settings"
    due = (now - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M")
    changes = {EXERCISE: {"due_at": due, "late_penalty_percent_per_day": "20"}}
    form = form_of(token_of(teacher.get(path)), changes)

    asked = post(teacher, path, form)
    assert asked.status_code == 200
    said = text_of(asked)
    assert "Not saved yet: this changes counted scores" in said
    assert (
        "One training step: zero, backward, step: the counted score of 2 learners changes" in said
    )
    with sessions() as session:
        row = session.scalars(
            select(Assignment).where(
                Assignment.course_id == course_id, Assignment.exercise_id == EXERCISE
            )
        ).one()
        assert row.due_at is None  # nothing saved
    confirmed = re.search(r'name="confirmed" value="([^"]+)"', asked.text)
    assert confirmed and confirmed[1] == f"{EXERCISE}:2"

    # Confirmed as said: saved.
    assert counted_in_gradebook(teacher, course_id) == ["10", "10", ""]
    saved = post(teacher, path, [*form, ("confirmed", confirmed[1])])
    assert saved.status_code == 303
    assert counted_in_gradebook(teacher, course_id) == ["8", "8", ""]
    audit = text_of(teacher.get(f"/courses/{course_id}/audit"))
    assert "20% off per day late, the best submission counts (2 counted scores changed)." in audit

    # A stale confirmation (the count it confirmed is no longer the count) is asked again.
    harsher = {EXERCISE: {"due_at": due, "late_penalty_percent_per_day": "50"}}
    again = post(
        teacher,
        path,
        [*form_of(token_of(teacher.get(path)), harsher), ("confirmed", f"{EXERCISE}:1")],
    )
    assert again.status_code == 200 and "the counted score of 2 learners changes" in text_of(again)
    # Bad input is refused with a sentence, whatever was confirmed.
    bad = {EXERCISE: {"due_at": "yesterday", "late_penalty_percent_per_day": "20"}}
    refused = post(teacher, path, [*form_of(token_of(teacher.get(path)), bad), ("confirmed", "x")])
    assert refused.status_code == 422 and "is not a date and time" in text_of(refused)
