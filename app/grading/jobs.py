"""A submission as a grading job: claimed under a lease, the lease renewed, released, its result
(or the server's error) recorded, and put back in the queue when a lease expires or a message
was lost. Every step is one UPDATE fenced on the current claim. These flush, never commit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    ColumnElement,
    Update,
    and_,
    bindparam,
    case,
    literal,
    or_,
    update,
)
from sqlalchemy.orm import Session

from app.grading.results import MAX_ERROR_MESSAGE_CHARS, bounded_report, cut, stored_feedback
from app.grading.submissions import queue_for_grading
from app.models import (
    Regrade,
    Submission,
    SubmissionStatus,
    utc_now,
)
from app.outbox import ScoreChange, report_score_change
from graders.report import GradeReport


@dataclass(frozen=True)
class GradingJob:
    """What a worker needs to grade one claimed submission. `attempt` fences late writes."""

    submission_id: str
    exercise_id: str
    code: str
    attempt: int
    learner_key: str | None = None


# Whose cases a per-learner exercise grades a submission on (graders.exercise.for_learner):
# read from the stored owner at every claim, so a regrade gets the same cases. Anonymous
# practice has no learner to vary for: the declared cases.
LEARNER_KEY: ColumnElement[str | None] = case(
    (Submission.user_id.is_not(None), literal("user:") + Submission.user_id),
    (
        Submission.api_key_id.is_not(None),
        literal("api:") + Submission.api_key_id + literal(":") + Submission.learner,
    ),
    else_=None,
)


def user_learner_key(user_id: str) -> str:
    """LEARNER_KEY of a signed-in user's submissions, for what is shown before one exists."""
    return f"user:{user_id}"


# The grading path's statements (claim, renew, release, finish) are built once and run on the
# session's connection with only their values bound: building an ORM statement per call and
# executing it through the ORM cost two to four times the CPU of running it, for nothing the ORM
# adds here: no object is loaded or kept in step (docs/performance.md#statements-built-once).
def _update_submission(where: ColumnElement[bool], **values: object) -> Update:
    return update(Submission).where(where).values(**values).returning(Submission.id)


def _lease_expired(now: datetime | ColumnElement[datetime]) -> ColumnElement[bool]:
    # Rows running from before leases existed (no lease at all) count as expired.
    return and_(
        Submission.status == SubmissionStatus.RUNNING,
        or_(Submission.lease_expires_at.is_(None), Submission.lease_expires_at < now),
    )


# Only the claim that is still current may write: a stale worker's late result is dropped.
_CURRENT_CLAIM = and_(
    Submission.id == bindparam("claimed_id"),
    Submission.status == SubmissionStatus.RUNNING,
    Submission.attempts == bindparam("claimed_attempt"),
)
_CLAIM = (
    update(Submission)
    .where(
        Submission.id == bindparam("claimed_id"),
        or_(Submission.status == SubmissionStatus.QUEUED, _lease_expired(bindparam("now"))),
    )
    .values(
        status=SubmissionStatus.RUNNING,
        started_at=bindparam("now"),
        lease_expires_at=bindparam("lease_expires_at"),
        attempts=Submission.attempts + 1,
    )
    .returning(
        Submission.exercise_id, Submission.code, Submission.attempts, LEARNER_KEY.label("key")
    )
)
_RENEW = _update_submission(_CURRENT_CLAIM, lease_expires_at=bindparam("lease_expires_at"))
_RELEASE = _update_submission(
    _CURRENT_CLAIM,
    status=SubmissionStatus.QUEUED,
    lease_expires_at=None,
    queued_at=bindparam("now"),
)


@functools.cache
def _finish_statement(columns: tuple[str, ...]) -> Update:
    return _update_submission(
        _CURRENT_CLAIM, lease_expires_at=None, **{c: bindparam(f"set_{c}") for c in columns}
    )


@functools.cache
def _finish_regrades_statement(columns: tuple[str, ...]) -> Update:
    return (
        update(Regrade)
        .where(Regrade.submission_id == bindparam("claimed_id"), Regrade.finished_at.is_(None))
        .values(finished_at=bindparam("now"), **{c: bindparam(f"set_{c}") for c in columns})
    )


def _claim_values(job: GradingJob) -> dict[str, object]:
    return {"claimed_id": job.submission_id, "claimed_attempt": job.attempt}


def _set_values(values: dict[str, object]) -> dict[str, object]:
    return {f"set_{column}": value for column, value in values.items()}


def claim_submission(
    session: Session, submission_id: str, *, lease_seconds: float
) -> GradingJob | None:
    """Mark the submission running under a lease, atomically; None if it is not claimable.

    Claimable: queued, or running under a lease that expired (its worker died). One UPDATE
    decides: on PostgreSQL a second claimant waits for the first's row lock, then finds the
    row no longer claimable; SQLite runs one writer at a time.
    """
    now = utc_now()
    row = (
        session.connection()
        .execute(
            _CLAIM,
            {
                "claimed_id": submission_id,
                "now": now,
                "lease_expires_at": now + timedelta(seconds=lease_seconds),
            },
        )
        .one_or_none()
    )
    if row is None:
        return None
    return GradingJob(submission_id, row.exercise_id, row.code, row.attempts, row.key)


def renew_lease(session: Session, job: GradingJob, *, lease_seconds: float) -> bool:
    """Extend the worker's claim; False if the claim was taken over (the lease had expired)."""
    expires_at = utc_now() + timedelta(seconds=lease_seconds)
    result = session.connection().execute(
        _RENEW, {**_claim_values(job), "lease_expires_at": expires_at}
    )
    return result.one_or_none() is not None


def release_claim(session: Session, job: GradingJob) -> bool:
    """Put a claimed submission back in the queue (the sandbox failed, not the learner)."""
    result = session.connection().execute(_RELEASE, {**_claim_values(job), "now": utc_now()})
    return result.one_or_none() is not None


def _finish(session: Session, job: GradingJob, **values: object) -> bool:
    statement = _finish_statement(tuple(values))
    result = session.connection().execute(statement, {**_claim_values(job), **_set_values(values)})
    return result.one_or_none() is not None


def _finish_regrades(session: Session, job: GradingJob, **values: object) -> None:
    # A regrade in progress for this submission now has its new result.
    statement = _finish_regrades_statement(tuple(values))
    session.connection().execute(
        statement, {**_claim_values(job), "now": utc_now(), **_set_values(values)}
    )


def record_report(
    session: Session,
    job: GradingJob,
    report: GradeReport,
    *,
    grading_wall_seconds: float | None = None,
) -> bool:
    """Store the grader's result and mark the submission graded; False if the claim is stale.

    `grading_wall_seconds`: how long the grading took, its wait for the release included
    (app/grading/fair_claim.py)."""
    report = bounded_report(report)
    stored = _finish(
        session,
        job,
        status=SubmissionStatus.GRADED,
        graded_at=utc_now(),
        grading_wall_seconds=grading_wall_seconds,
        # The version graded against, which after a restart may be newer than the submitted one.
        exercise_version=report.exercise_version,
        score=report.score,
        max_score=report.max_score,
        diagnosis=report.diagnosis,
        checks=[check.model_dump(mode="json") for check in report.checks],
        **stored_feedback(report),
        plots=[plot.model_dump(mode="json") for plot in report.plots],
        output=report.output,
        error_message=None,
    )
    if stored:
        # In this transaction: the result and what reports it elsewhere commit together.
        report_score_change(session, ScoreChange.GRADED, job.submission_id)
        _finish_regrades(
            session,
            job,
            new_status=SubmissionStatus.GRADED,
            new_score=report.score,
            new_max_score=report.max_score,
            new_diagnosis=report.diagnosis,
            new_exercise_version=report.exercise_version,
        )
    return stored


def record_error(session: Session, job: GradingJob, message: str) -> bool:
    """Mark the submission failed by a server fault; False if the claim is stale."""
    stored = _finish(
        session,
        job,
        status=SubmissionStatus.ERROR,
        error_message=cut(message, MAX_ERROR_MESSAGE_CHARS),
    )
    if stored:
        _finish_regrades(session, job, new_status=SubmissionStatus.ERROR)
    return stored


def requeue_expired_leases(session: Session) -> list[str]:
    """Put back running submissions whose worker stopped renewing the lease; return their ids.

    Each is queued for grading (sent once the transaction commits). Safe to run on every host
    at once: each row is requeued by one UPDATE only.
    """
    submission_ids = list(
        session.scalars(
            update(Submission)
            .where(_lease_expired(utc_now()))
            .values(status=SubmissionStatus.QUEUED, lease_expires_at=None, queued_at=utc_now())
            .returning(Submission.id)
            .execution_options(synchronize_session=False)
        )
    )
    for submission_id in submission_ids:
        queue_for_grading(session, submission_id)
    return submission_ids


def requeue_waiting(session: Session, *, queued_before: datetime | None) -> list[str]:
    """Ids of queued submissions to send to the workers again, oldest first, marked as sent.

    `queued_before` None takes every queued row (a start whose in-process queue is empty);
    otherwise those queued before it, whose broker message was likely lost. One UPDATE
    marks and returns them, so two hosts sweeping at once do not both send a row; each is
    queued for grading (sent once the transaction commits).
    """
    waiting = Submission.status == SubmissionStatus.QUEUED
    if queued_before is not None:
        waiting = and_(
            waiting,
            or_(Submission.queued_at.is_(None), Submission.queued_at < queued_before),
        )
    rows = session.execute(
        update(Submission)
        .where(waiting)
        .values(queued_at=utc_now())
        .returning(Submission.id, Submission.created_at)
        .execution_options(synchronize_session=False)
    ).all()
    submission_ids = [row.id for row in sorted(rows, key=lambda row: row.created_at)]
    for submission_id in submission_ids:
        queue_for_grading(session, submission_id)
    return submission_ids
