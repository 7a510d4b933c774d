"""A regrade's dry run on Celery workers: the worker grades each submission for real, stores
the result on the dry run's rows only, and sends nothing (no outbox message, so no webhook and
no LMS score), though the course has a webhook that a real grade would call."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from sqlalchemy import select

from app.db import SessionFactory
from app.models import DryRunGrade, OutboxMessage, Regrade, Submission
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.app.people import graded, sign_in, token_of
from tests.app.test_regrade_dry_run import course_with_a_webhook
from tests.hosts.conftest import Worker
from tests.hosts.test_faults import wait_for
from tests.servers import HTTP_TIMEOUT_SECONDS


def test_a_dry_run_on_a_celery_worker_stores_and_sends_nothing(
    api: httpx.Client, sessions: SessionFactory, start_worker: Callable[..., Worker]
) -> None:
    course_id, ann = course_with_a_webhook(sessions)
    # The correct code, recorded as 2/10 by an older grader: a regrade would make it 10.
    submission_id = graded(sessions, user_id=ann, course_id=course_id, score=2, code=CORRECT_CODE)
    with sessions() as session:
        before = session.get(Submission, submission_id)
        assert before is not None
        recorded = (before.status, before.score, before.diagnosis, before.graded_at)
    worker = start_worker()

    teacher = httpx.Client(base_url=str(api.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(teacher, "tess@example.org").status_code == 303
    confirm = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    started = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade/dry-run",
        data={"which": "all", "csrf_token": token_of(confirm)},
    )
    assert started.status_code == 303, started.text

    def graded_by_the_worker() -> bool:
        with sessions() as session:
            return [row.status for row in session.scalars(select(DryRunGrade))] == ["graded"]

    wait_for(graded_by_the_worker, "the dry run on the worker")
    with sessions() as session:
        (row,) = session.scalars(select(DryRunGrade)).all()
        assert (row.new_score, row.new_diagnosis) == (10, "correct")
        after = session.get(Submission, submission_id)
        assert after is not None
        assert (after.status, after.score, after.diagnosis, after.graded_at) == recorded
        assert session.query(Regrade).count() == 0
        assert session.query(OutboxMessage).count() == 0
    assert f"dry run {row.id}: graded" in worker.log()
    page = teacher.get(started.headers["location"])
    assert "1 of 1 graded: done; 1 would change. Nothing was stored." in " ".join(page.text.split())
