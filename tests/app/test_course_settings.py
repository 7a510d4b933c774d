"""An instructor sets due dates and policies, makes a new join code, adds an instructor."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from app.db import SessionFactory
from app.models import Assignment, AuditEvent, Course, SiteRole
from tests.app.conftest import EXERCISE
from tests.app.people import make_course, make_user, sign_in, token_of


def test_due_dates_policies_join_code_and_instructors(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "uma@example.org")
    course_id = make_course(sessions, "tess@example.org")
    teacher = httpx.Client(base_url=str(client.base_url))
    sign_in(teacher, "tess@example.org")
    path = f"/courses/{course_id}/settings"
    action = f"{path}/exercises/{EXERCISE}"

    saved = teacher.post(
        action,
        data={
            "csrf_token": token_of(teacher.get(path)),
            "assigned": "1",
            "due_at": "2026-12-01T17:30",
            "timezone": "Europe/Paris",  # what time.js sends
            "late_policy": "penalty",
            "late_penalty_percent_per_day": "12.5",
            "scoring_policy": "latest",
        },
    )
    assert saved.status_code == 303 and "done=saved" in saved.headers["location"]
    with sessions() as session:
        row = session.query(Assignment).filter_by(course_id=course_id, exercise_id=EXERCISE).one()
        assert row.due_at == datetime(2026, 12, 1, 16, 30, tzinfo=UTC)
        assert (row.late_penalty_percent_per_day, row.scoring_policy) == (12.5, "latest")
    home = teacher.get(f"/courses/{course_id}").text
    assert "2026-12-01 16:30 UTC" in home
    assert "loses 12.5% of its score for each started day" in home

    bad = teacher.post(
        action,
        data={
            "csrf_token": token_of(teacher.get(path)),
            "assigned": "1",
            "late_policy": "penalty",
            "late_penalty_percent_per_day": "150",
            "scoring_policy": "best",
        },
    )
    assert bad.status_code == 422 and "from 0 to 100" in bad.text

    unset = teacher.post(
        f"{path}/exercises/fix-the-loop",
        data={"csrf_token": token_of(teacher.get(path)), "late_policy": "lock"},
    )
    assert unset.status_code == 303
    assert teacher.get(f"/courses/{course_id}").text.count("/exercises/") >= 4
    assert "Fix the loop" not in teacher.get(f"/courses/{course_id}").text

    with sessions() as session:
        old_code = session.get(Course, course_id).join_code  # type: ignore[union-attr]
    new = teacher.post(f"{path}/join-code", data={"csrf_token": token_of(teacher.get(path))})
    assert new.status_code == 303
    page = teacher.get(new.headers["location"]).text
    assert "New join code made" in page and old_code not in page

    added = teacher.post(
        f"{path}/instructors",
        data={"csrf_token": token_of(teacher.get(path)), "email": "uma@example.org"},
    )
    assert added.status_code == 303
    uma = httpx.Client(base_url=str(client.base_url))
    sign_in(uma, "uma@example.org")
    assert uma.get(f"/courses/{course_id}/gradebook").status_code == 200
    nobody = teacher.post(
        f"{path}/instructors",
        data={"csrf_token": token_of(teacher.get(path)), "email": "nobody@example.org"},
    )
    assert nobody.status_code == 422 and "sign up first" in nobody.text

    with sessions() as session:
        actions = [e.action for e in session.query(AuditEvent).order_by(AuditEvent.id)]
    assert actions == [
        "assignment.set",
        "assignment.removed",
        "course.join-code",
        "course.instructor-added",
    ]
