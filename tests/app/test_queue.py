"""Claiming, grading and recording: idempotent per submission, safe across restarts."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from app.db import SessionFactory
from app.grading.queue import run_grading_job
from app.grading.submissions import (
    GradingJob,
    claim_submission,
    create_submission,
    record_report,
    requeue_unfinished,
)
from app.models import Submission, utc_now
from graders.report import Check, GradeReport
from tests.app.conftest import CORRECT_CODE, EXERCISE


def add_submission(sessions: SessionFactory, code: str = CORRECT_CODE) -> str:
    with sessions.begin() as session:
        return create_submission(
            session, exercise_id=EXERCISE, learner="l", code=code, max_code_bytes=65536
        ).id


def row_state(sessions: SessionFactory, submission_id: str) -> dict[str, Any]:
    with sessions() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        return {
            column: getattr(row, column)
            for column in (
                "status",
                "score",
                "max_score",
                "diagnosis",
                "checks",
                "feedback",
                "error_message",
                "attempts",
                "started_at",
                "exercise_version",
                "graded_at",
            )
        }


def test_grading_twice_changes_nothing(sessions: SessionFactory) -> None:
    submission_id = add_submission(sessions)
    run_grading_job(sessions, submission_id)
    graded = row_state(sessions, submission_id)
    assert graded["status"] == "graded"
    assert graded["diagnosis"] == "correct"
    assert graded["attempts"] == 1

    # The same job delivered again (a retry, a duplicate message): nothing happens.
    run_grading_job(sessions, submission_id)
    assert row_state(sessions, submission_id) == graded
    with sessions.begin() as session:
        assert claim_submission(session, submission_id) is None
    assert row_state(sessions, submission_id) == graded


def test_only_one_of_many_concurrent_claims_wins(sessions: SessionFactory) -> None:
    submission_id = add_submission(sessions)
    start = threading.Barrier(8)
    jobs: list[GradingJob | None] = []

    def claim() -> None:
        start.wait()
        with sessions.begin() as session:
            jobs.append(claim_submission(session, submission_id))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(jobs) == 8
    assert len([job for job in jobs if job is not None]) == 1
    assert row_state(sessions, submission_id)["attempts"] == 1


def test_a_stale_claim_cannot_overwrite_the_current_one(sessions: SessionFactory) -> None:
    submission_id = add_submission(sessions)
    with sessions.begin() as session:
        first = claim_submission(session, submission_id)
    # The process restarts while `first` is still grading somewhere: the row is claimed again.
    with sessions.begin() as session:
        assert requeue_unfinished(session) == [submission_id]
        second = claim_submission(session, submission_id)
    assert first is not None and second is not None
    assert (first.attempt, second.attempt) == (1, 2)

    def report(score: float) -> GradeReport:
        check = Check(id="runs", passed=True, points=score, max_points=1, message="ran")
        return GradeReport(
            exercise=EXERCISE,
            exercise_version="v2",
            score=score,
            max_score=1,
            diagnosis="correct",
            checks=[check],
            feedback="ok",
        )

    with sessions.begin() as session:
        assert record_report(session, first, report(0.0)) is False
        assert record_report(session, second, report(1.0)) is True
    state = row_state(sessions, submission_id)
    assert (state["status"], state["score"], state["attempts"]) == ("graded", 1.0, 2)
    assert state["exercise_version"] == "v2", "the result records the version it was graded on"


def test_requeue_takes_back_queued_and_running_only(sessions: SessionFactory) -> None:
    now = utc_now()
    statuses = ["running", "graded", "queued", "error", "running"]
    with sessions.begin() as session:
        rows = [
            Submission(
                exercise_id=EXERCISE,
                exercise_version="v",
                learner="l",
                code="x = 1",
                status=status,
                attempts=0,
                created_at=now + timedelta(seconds=index),
            )
            for index, status in enumerate(statuses)
        ]
        session.add_all(rows)
        session.flush()
        ids = [row.id for row in rows]

    with sessions.begin() as session:
        requeued = requeue_unfinished(session)
    assert requeued == [ids[0], ids[2], ids[4]]
    assert [row_state(sessions, i)["status"] for i in ids] == [
        "queued",
        "graded",
        "queued",
        "error",
        "queued",
    ]


def test_a_server_fault_is_an_error_not_a_grade(
    sessions: SessionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # An exercise removed from the server after the submission arrived: the grader raises.
    with sessions.begin() as session:
        row = Submission(
            exercise_id="retired-exercise",
            exercise_version="v",
            learner="l",
            code=CORRECT_CODE,
            status="queued",
            attempts=0,
        )
        session.add(row)
        session.flush()
        submission_id = row.id

    run_grading_job(sessions, submission_id)
    state = row_state(sessions, submission_id)
    assert state["status"] == "error"
    assert "retired-exercise" in state["error_message"]
    assert state["score"] is None and state["graded_at"] is None
    assert submission_id in caplog.text
