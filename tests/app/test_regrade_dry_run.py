"""A regrade's dry run grades for real in the sandbox and shows what a regrade would change
(per submission, and each learner's counted score), storing no result, telling no learner and
sending nothing to the LMS or webhooks; it is audited. A real regrade after it does all that,
which shows the checks here could fail."""

from __future__ import annotations

import html
import re

import httpx
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.webhooks import create_webhook
from app.models import (
    AuditEvent,
    DryRunGrade,
    OutboxMessage,
    Regrade,
    SiteRole,
    Submission,
)
from graders.exercises import get_exercise
from graders.proving import judge_source
from tests.app.conftest import CORRECT_CODE, EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.app.test_gradebook import wait_for
from tests.servers import HTTP_TIMEOUT_SECONDS

# What a regrade could change on a submission, and what the learners and the LMS are told from.
RESULT_COLUMNS = ("status", "score", "max_score", "diagnosis", "exercise_version", "graded_at")


def _results(sessions: SessionFactory) -> dict[str, tuple[object, ...]]:
    with sessions() as session:
        return {
            s.id: tuple(getattr(s, column) for column in RESULT_COLUMNS)
            for s in session.scalars(select(Submission))
        }


def _count(sessions: SessionFactory, model: type) -> int:
    with sessions() as session:
        return session.query(model).count()


def course_with_a_webhook(sessions: SessionFactory) -> tuple[str, str]:
    """Tess's course with Ann in it and a webhook, which a real grade in it would call (a dry
    run must not): (course id, Ann's id)."""
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR, name="Tess")
    ann = make_user(sessions, "ann@example.org", name="Ann")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org")
    with sessions.begin() as session:
        create_webhook(
            session,
            course_id=course_id,
            url="http://127.0.0.1:9/hook",
            allow_private_addresses=True,
        )
    return course_id, ann


def test_a_dry_run_shows_what_a_regrade_would_change_and_changes_nothing(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, ann = course_with_a_webhook(sessions)
    # The correct code recorded as 2/10 (an old grader's mistake); the buggy code as graded now.
    fixed = graded(sessions, user_id=ann, course_id=course_id, score=2, code=CORRECT_CODE)
    buggy = judge_source(get_exercise(EXERCISE), MISSING_ZERO_GRAD_CODE)
    graded(
        sessions,
        user_id=ann,
        course_id=course_id,
        score=buggy.score,
        diagnosis=buggy.diagnosis,
        code=MISSING_ZERO_GRAD_CODE,
    )
    before = _results(sessions)
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(teacher, "tess@example.org").status_code == 303

    confirm = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    assert "Dry run first</button>" in confirm.text
    # No reason is needed: nobody is told anything.
    started = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade/dry-run",
        data={"which": "all", "csrf_token": token_of(confirm)},
    )
    assert started.status_code == 303, started.text
    page_path = started.headers["location"]
    assert re.fullmatch(rf"/courses/{course_id}/exercises/{EXERCISE}/dry-runs/[\w-]+", page_path)
    assert "of 2 graded" in teacher.get(page_path).text

    def finished() -> bool:
        return 'data-finished="true"' in teacher.get(page_path, params={"part": "1"}).text

    wait_for(finished, "the dry run")
    page = html.unescape(" ".join(teacher.get(page_path).text.split()))
    assert "2 of 2 graded: done; 1 would change. Nothing was stored." in page
    submissions = page.split('class="data compact cards dry-run-submissions"', 1)[1]
    assert f'href="/submissions/{fixed}"' in submissions
    assert "2 Gradients not cleared before backward" in submissions
    assert "10 Correct" in submissions
    learners = page.split('class="data compact cards dry-run-learners"', 1)[1].split("</table>")[0]
    # Ann's best counts: the buggy code's score now, the corrected 10 after a regrade.
    assert re.search(rf"someone@example.org</th>.*?>{buggy.score:g}</td>.*?>10</td>", learners)

    # Nothing stored, nobody told, nothing sent; the dry run is in the audit log.
    assert _results(sessions) == before
    assert _count(sessions, Regrade) == 0
    assert _count(sessions, OutboxMessage) == 0
    with sessions() as session:
        assert {row.status for row in session.scalars(select(DryRunGrade))} == {"graded"}
        (event,) = session.scalars(select(AuditEvent)).all()
        assert event.action == "regrade.dry-run"
    learner = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(learner, "ann@example.org")
    assert "A regrade changed" not in learner.get(f"/courses/{course_id}").text
    audit = html.unescape(teacher.get(f"/courses/{course_id}/audit").text)
    assert "Tess made a dry run of a regrade of 2 submissions of" in audit
    assert "(nothing was changed)" in audit

    # The real regrade does change the score and send the webhook: the checks above could fail.
    confirm = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    done = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade",
        data={
            "which": "all",
            "expected_count": "2",
            "reason": "grader-updated",
            "csrf_token": token_of(confirm),
        },
    )
    assert done.status_code == 303

    def regraded() -> bool:
        with sessions() as session:
            rows = session.scalars(select(Regrade)).all()
            return len(rows) == 2 and all(row.finished_at is not None for row in rows)

    wait_for(regraded, "the real regrade")
    assert _results(sessions)[fixed][1:4] == (10, 10, "correct")
    assert _count(sessions, OutboxMessage) > 0


def test_a_dry_run_is_for_the_courses_instructors_only_and_needs_something_to_grade(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "olga@example.org", SiteRole.INSTRUCTOR)
    ann = make_user(sessions, "ann@example.org")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org")
    make_course(sessions, "olga@example.org")
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "tess@example.org")
    confirm = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    nothing = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade/dry-run",
        data={"which": "all", "csrf_token": token_of(confirm)},
    )
    assert nothing.status_code == 409 and "No dry run was made" in nothing.text
    assert _count(sessions, AuditEvent) == 0

    graded(sessions, user_id=ann, course_id=course_id, score=2, code=CORRECT_CODE)
    started = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade/dry-run",
        data={"which": "all", "csrf_token": token_of(confirm)},
    )
    assert started.status_code == 303
    page_path = started.headers["location"]
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(other, "olga@example.org")
    assert other.get(page_path).status_code == 404
    # Another exercise's address, or an unknown batch, is no dry run of this course.
    assert teacher.get(page_path.replace(EXERCISE, "fix-the-loop")).status_code == 404
    assert teacher.get(page_path.rsplit("/", 1)[0] + "/no-such-batch").status_code == 404
    without_token = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade/dry-run", data={"which": "all"}
    )
    assert 400 <= without_token.status_code < 500
    assert _count(sessions, DryRunGrade) == 1
