"""A course's instructors change its staff from the settings page: an instructor made a
learner or taken out, never the last one; audited; only instructors may."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import event, select, update
from sqlalchemy.orm import Session

from app.audit import AuditAction
from app.courses.membership import CourseError, StaffChange, change_staff
from app.db import SessionFactory
from app.models import AuditEvent, Course, CourseRole, Enrolment, SiteRole, Submission, User
from app.people.accounts import find_user_by_email
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS


def signed_in(client: httpx.Client, email: str) -> httpx.Client:
    browser = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(browser, email).status_code == 303
    return browser


def change(browser: httpx.Client, course_id: str, user_id: str, what: str) -> httpx.Response:
    token = token_of(browser.get(f"/courses/{course_id}/settings"))
    return browser.post(
        f"/courses/{course_id}/staff",
        data={"csrf_token": token, "user_id": user_id, "change": what},
    )


def roles(sessions: SessionFactory, course_id: str) -> dict[str, str]:
    with sessions() as session:
        rows = session.scalars(select(Enrolment).where(Enrolment.course_id == course_id))
        return {row.user_id: row.role for row in rows}


def test_staff_changes_keep_one_instructor_and_are_audited(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    tess = make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    uma = make_user(sessions, "uma@example.org")
    lee = make_user(sessions, "lee@example.org")
    course_id = make_course(sessions, "tess@example.org", "uma@example.org", "lee@example.org")
    kept = graded(sessions, user_id=uma, course_id=course_id, score=10)
    teacher = signed_in(client, "tess@example.org")
    path = f"/courses/{course_id}/settings"

    # Alone, Tess cannot step down: no button, and a forged post is refused.
    page = teacher.get(path).text
    assert 'id="last-instructor"' in page and "Remove from the course" not in page
    refused = change(teacher, course_id, tess, "remove")
    assert refused.status_code == 422 and "only instructor" in refused.text
    assert roles(sessions, course_id)[tess] == CourseRole.INSTRUCTOR

    # Uma, a learner of the course, is made an instructor (as the settings form's add does).
    with sessions.begin() as session:
        session.execute(
            update(Enrolment)
            .where(Enrolment.course_id == course_id, Enrolment.user_id == uma)
            .values(role=CourseRole.INSTRUCTOR)
        )
    page = teacher.get(path).text
    assert page.count("Remove from the course") == 2
    assert change(teacher, course_id, uma, "make-learner").status_code == 303
    assert roles(sessions, course_id)[uma] == CourseRole.LEARNER
    # A learner is no staff to change.
    not_staff = change(teacher, course_id, lee, "remove")
    assert not_staff.status_code == 422 and "not an instructor" in not_staff.text
    bogus = change(teacher, course_id, uma, "make-king")
    assert bogus.status_code == 422

    with sessions.begin() as session:
        session.execute(
            update(Enrolment)
            .where(Enrolment.course_id == course_id, Enrolment.user_id == uma)
            .values(role=CourseRole.INSTRUCTOR)
        )
    assert change(teacher, course_id, uma, "remove").status_code == 303
    assert uma not in roles(sessions, course_id)
    with sessions() as session:
        # Her submission stays, in the course's records.
        assert session.get(Submission, kept) is not None
        sentences = [
            (event.action, event.details)
            for event in session.scalars(
                select(AuditEvent)
                .where(AuditEvent.action == AuditAction.COURSE_STAFF_CHANGED)
                .order_by(AuditEvent.id)
            )
        ]
    assert sentences == [
        ("course.staff-changed", {"email": "uma@example.org", "change": "make-learner"}),
        ("course.staff-changed", {"email": "uma@example.org", "change": "remove"}),
    ]
    audit = teacher.get(f"/courses/{course_id}/audit").text
    assert "took uma@example.org out of the course" in audit
    assert "made uma@example.org a learner instead of an instructor" in audit


def test_only_instructors_change_staff_and_need_the_csrf_token(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    tess = make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "vic@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "lee@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org")
    with sessions.begin() as session:
        vic = find_user_by_email(session, "vic@example.org")
        assert vic is not None
        session.add(Enrolment(course_id=course_id, user_id=vic.id, role=CourseRole.INSTRUCTOR))
    learner = signed_in(client, "lee@example.org")
    token = token_of(learner.get("/"))
    forbidden = learner.post(
        f"/courses/{course_id}/staff",
        data={"csrf_token": token, "user_id": tess, "change": "remove"},
    )
    assert forbidden.status_code == 403
    teacher = signed_in(client, "tess@example.org")
    teacher.get(f"/courses/{course_id}/settings")
    no_token = teacher.post(
        f"/courses/{course_id}/staff", data={"user_id": tess, "change": "remove"}
    )
    assert no_token.status_code == 403
    assert roles(sessions, course_id)[tess] == CourseRole.INSTRUCTOR

    # Stepping down oneself (another instructor stays) leads home.
    stepped = change(teacher, course_id, tess, "remove")
    assert stepped.status_code == 303 and stepped.headers["location"] == "/"
    assert tess not in roles(sessions, course_id)


SIMULTANEOUS_CHANGES = {
    # Tess demotes Uma while Uma demotes Tess: Uma is no longer an instructor for hers.
    "each-other": (("tess", "uma"), ("uma", "tess")),
    # Both step down: Tess would leave the course with none.
    "both-step-down": (("uma", "uma"), ("tess", "tess")),
}
REFUSED = {
    "each-other": "you are no longer an instructor of this course: reload the page",
    "both-step-down": "the course's only instructor is tess@example.org: add another "
    "instructor first",
}


@pytest.mark.parametrize("changes", list(SIMULTANEOUS_CHANGES))
def test_two_instructors_changing_the_staff_at_once_keep_the_course_taught(
    sessions: SessionFactory, changes: str
) -> None:
    """The first change is made and held uncommitted; the second starts while it is held, and
    the first commits only once the second is about to write (`second_writes`): so the second
    has read the staff before the first's commit, whatever the machine's speed. Unlocked, both
    succeeded and the course had no instructor left."""
    ids = {
        name: make_user(sessions, f"{name}@example.org", SiteRole.INSTRUCTOR)
        for name in ("tess", "uma")
    }
    course_id = make_course(sessions, "tess@example.org")
    with sessions.begin() as session:
        session.add(Enrolment(course_id=course_id, user_id=ids["uma"], role=CourseRole.INSTRUCTOR))
    (first_by, first_user), (second_by, second_user) = SIMULTANEOUS_CHANGES[changes]
    second_writes = threading.Event()

    def make_learner(session: Session, by: str, user: str) -> None:
        change_staff(
            session,
            course=session.get_one(Course, course_id),
            user=session.get_one(User, ids[user]),
            change=StaffChange.MAKE_LEARNER,
            by=session.get_one(User, ids[by]),
        )

    def second_change() -> str:
        with sessions() as session:

            @event.listens_for(session.connection(), "before_cursor_execute")
            def on_write(_c: object, _cur: object, statement: str, *_: object) -> None:
                if statement.lstrip().upper().startswith(("UPDATE", "DELETE", "INSERT")):
                    second_writes.set()

            try:
                make_learner(session, second_by, second_user)
            except CourseError as exc:
                return str(exc)
            session.commit()
            return "done"

    with sessions() as first, ThreadPoolExecutor(1) as pool:
        make_learner(first, first_by, first_user)
        second = pool.submit(second_change)
        assert second_writes.wait(timeout=120), second.result()
        first.commit()
        said = second.result(timeout=120)

    assert said == REFUSED[changes]
    staff = roles(sessions, course_id)
    assert staff == {ids["tess"]: CourseRole.INSTRUCTOR, ids["uma"]: CourseRole.LEARNER}
