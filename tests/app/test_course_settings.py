"""An instructor sets due dates and policies, makes a new join code, adds an instructor: one
form, saved together, so a change in one part is never dropped by saving another."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import httpx

from app.courses.extensions import set_extension
from app.db import SessionFactory
from app.models import Assignment, AuditEvent, Course, SiteRole, User, utc_now
from app.people.accounts import find_user_by_email
from app.people.tokens import create_personal_token
from graders.exercises import get_exercise, list_exercises
from tests.app.conftest import EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS

EXERCISES = [e.id for e in list_exercises()]


def post(client: httpx.Client, path: str, fields: list[tuple[str, str]]) -> httpx.Response:
    """Post repeated fields (each key's values in their order, as a browser sends them)."""
    data: dict[str, list[str]] = {}
    for key, value in fields:
        data.setdefault(key, []).append(value)
    return client.post(path, data=data)


def form_of(
    token: str, changes: dict[str, dict[str, str]] | None = None, **extra: str
) -> list[tuple[str, str]]:
    """The settings form as a browser sends it: every exercise's fields, in order, with the
    given changes per exercise (unset exercises are left as the course made them: set)."""
    fields = [("csrf_token", token), ("timezone", "UTC")]
    for exercise_id in EXERCISES:
        values = {
            "assigned": "1",
            "due_at": "",
            "late_policy": "penalty",
            "late_penalty_percent_per_day": "0",
            "scoring_policy": "best",
            **(changes or {}).get(exercise_id, {}),
        }
        fields.append(("exercise", exercise_id))
        if values.pop("assigned"):
            fields.append(("assigned", exercise_id))
        fields.extend(values.items())
    return [*fields, *extra.items()]


def test_one_form_saves_every_section_together(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "uma@example.org")
    course_id = make_course(sessions, "tess@example.org")
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "tess@example.org")
    path = f"/courses/{course_id}/settings"
    main = teacher.get(path).text.split('<main id="main">')[1]
    # The settings' one form, and the exercise list's own (saved apart: test_course_exercise_list).
    assert main.count("<form ") == 2 and main.count('type="submit"') == 2
    assert main.count('action="/courses/') == 2
    with sessions() as session:
        old_code = session.get(Course, course_id).join_code  # type: ignore[union-attr]

    # Two exercises changed, an instructor added and a new join code, in one save.
    changes = {
        EXERCISE: {
            "due_at": "2026-12-01T17:30",
            "late_penalty_percent_per_day": "12.5",
            "scoring_policy": "latest",
        },
        "fix-the-loop": {"assigned": "", "late_policy": "lock"},
    }
    form = form_of(token_of(teacher.get(path)), changes, instructor_email="uma@example.org")
    form = [(k, "Europe/Paris" if k == "timezone" else v) for k, v in form]  # as time.js sends
    saved = post(teacher, path, [*form, ("new_join_code", "1")])
    assert saved.status_code == 303
    notice = teacher.get(saved.headers["location"]).text
    assert "Settings saved. Changed: One training step: zero, backward, step, Fix the loop." in (
        notice
    )
    assert old_code not in notice
    with sessions() as session:
        rows = {a.exercise_id: a for a in session.query(Assignment).filter_by(course_id=course_id)}
        assert rows[EXERCISE].due_at == datetime(2026, 12, 1, 16, 30, tzinfo=UTC)
        assert (rows[EXERCISE].late_penalty_percent_per_day, rows[EXERCISE].scoring_policy) == (
            12.5,
            "latest",
        )
        # Unset, the row is kept (its submissions, grades and policy come back with it).
        assert rows["fix-the-loop"].removed_at is not None
        assert sorted(e for e, row in rows.items() if row.removed_at is None) == sorted(
            e.id for e in list_exercises() if e.id != "fix-the-loop"
        )
        actions = [e.action for e in session.query(AuditEvent).order_by(AuditEvent.id)]
    # Only what changed is logged.
    assert actions == [
        "assignment.set",
        "assignment.removed",
        "course.instructor-added",
        "course.join-code",
    ]
    home = teacher.get(f"/courses/{course_id}").text
    assert "2026-12-01 16:30 UTC" in home
    assert "loses 12.5% of its score for each started day" in home
    assert "Fix the loop" not in home
    uma = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(uma, "uma@example.org")
    assert uma.get(f"/courses/{course_id}/gradebook").status_code == 200

    # Saving again with nothing changed says so.
    same = form_of(token_of(teacher.get(path)), changes)
    same = [(k, "Europe/Paris" if k == "timezone" else v) for k, v in same]
    unchanged = post(teacher, path, same)
    assert "Nothing had changed" in teacher.get(unchanged.headers["location"]).text


def test_an_error_saves_nothing_and_keeps_every_field_as_sent(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "tess@example.org")
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "tess@example.org")
    path = f"/courses/{course_id}/settings"
    changes = {
        "prove-accumulation": {"due_at": "2026-11-30T09:15", "scoring_policy": "latest"},
        EXERCISE: {"late_penalty_percent_per_day": "150"},
        "fix-the-loop": {"assigned": ""},
    }
    form = form_of(token_of(teacher.get(path)), changes, instructor_email="nobody@example.org")
    bad = post(teacher, path, [*form, ("new_join_code", "1")])
    assert bad.status_code == 422
    assert "Nothing was saved." in bad.text
    assert "from 0 to 100" in bad.text and "they need to sign up" in bad.text
    # What was typed is all still there: the other exercise's date and policy, the unticked
    # box, the bad penalty, the email and the join-code box.
    assert 'value="2026-11-30T09:15"' in bad.text
    assert 'name="late_penalty_percent_per_day" type="number"' in bad.text and 'value="150"' in (
        bad.text
    )
    assert 'value="fix-the-loop" >' in bad.text or 'value="fix-the-loop"  >' in bad.text
    assert 'value="nobody@example.org"' in bad.text
    assert 'name="new_join_code" value="1" checked' in bad.text
    assert bad.text.count('<option value="latest" selected>') == 1
    with sessions() as session:
        rows = session.query(Assignment).filter_by(course_id=course_id).all()
        assert len(rows) == len(list_exercises()) and all(r.due_at is None for r in rows)
        assert session.query(AuditEvent).count() == 0


def test_an_incomplete_form_is_refused(client: httpx.Client, sessions: SessionFactory) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "tess@example.org")
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "tess@example.org")
    path = f"/courses/{course_id}/settings"
    token = token_of(teacher.get(path))
    short = teacher.post(path, data={"csrf_token": token, "exercise": EXERCISE})
    assert short.status_code == 422 and "incomplete" in short.text
    unknown = form_of(token, {})
    unknown = [(k, "no-such" if (k, v) == ("exercise", EXERCISE) else v) for k, v in unknown]
    refused = post(teacher, path, unknown)
    assert refused.status_code == 422 and "no-such" in refused.text


def test_the_reference_is_shown_after_the_due_date_never_before_nor_during_an_extension(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR, name="Tess")
    lee_id = make_user(sessions, "lee@example.org", name="Lee")
    max_id = make_user(sessions, "max@example.org", name="Max")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org", "max@example.org")
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "tess@example.org")
    learners, tokens, in_course, in_practice = {}, {}, {}, {}
    for name, user_id in (("lee", lee_id), ("max", max_id)):
        learners[name] = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
        sign_in(learners[name], f"{name}@example.org")
        with sessions.begin() as session:
            user = session.get(User, user_id)
            assert user is not None
            _, tokens[name] = create_personal_token(
                session, user, name="laptop", lifetime_days=30, max_days=30
            )
        in_course[name] = graded(sessions, user_id=user_id, course_id=course_id, score=3)
        in_practice[name] = graded(sessions, user_id=user_id, course_id=None, score=3)
    path = f"/courses/{course_id}/settings"
    exercise_page = f"/courses/{course_id}/exercises/{EXERCISE}"
    reference = get_exercise(EXERCISE).solution_code
    solution = html.escape(reference.strip().splitlines()[0])

    def save(due_at: str, *, show: bool) -> None:
        form = form_of(token_of(teacher.get(path)), {EXERCISE: {"due_at": due_at}})
        saved = post(teacher, path, [*form, *([("show_solution", EXERCISE)] if show else [])])
        assert saved.status_code == 303, saved.text

    def shown_to(name: str) -> bool:
        page = learners[name].get(exercise_page).text
        on_page = 'id="solution"' in page and solution in page
        # The learner's API (what the client reads) shows it exactly when the page does: on
        # the exercise and on a result in the course; never in practice.
        expected = reference if on_page else None
        headers = {"Authorization": f"Bearer {tokens[name]}"}
        mine = client.get("/api/v1/me/exercises", headers=headers).json()
        (course,) = mine["courses"]
        (listed,) = [e for e in course["exercises"] if e["id"] == EXERCISE]
        assert listed["solution"] == expected
        assert [e["solution"] for e in mine["practice"]] == [None] * len(mine["practice"])
        for submission_id, shown in ((in_course[name], expected), (in_practice[name], None)):
            one = client.get(f"/api/v1/me/submissions/{submission_id}", headers=headers).json()
            assert one["solution"] == shown
        history = client.get("/api/v1/me/submissions", headers=headers).json()
        assert {row["id"]: row["solution"] for row in history} == {
            in_course[name]: expected,
            in_practice[name]: None,
        }
        return on_page

    # Set, with the due date ahead: the box is ticked, and nobody sees the reference yet.
    save("2099-01-01T00:00", show=True)
    assert re.search(r'name="show_solution" value="train-step" checked', teacher.get(path).text)
    assert not shown_to("lee") and not shown_to("max")
    # Undated: never.
    save("", show=True)
    assert not shown_to("lee")
    # The due date passed: shown; but not to Max, whose extension still runs.
    save("2020-01-01T00:00", show=True)
    with sessions.begin() as session:
        max_user, tess = session.get(User, max_id), find_user_by_email(session, "tess@example.org")
        assert max_user is not None and tess is not None
        set_extension(
            session,
            course_id=course_id,
            exercise_id=EXERCISE,
            learner=max_user,
            due_at=utc_now() + timedelta(days=1),
            extra_attempts=0,
            extra_minutes=0,
            by=tess,
        )
    assert shown_to("lee") and not shown_to("max")
    audit = teacher.get(f"/courses/{course_id}/audit").text
    assert "the reference shown after the due date" in audit
    # Unticked: hidden again.
    save("2020-01-01T00:00", show=False)
    assert not shown_to("lee")
