"""Submissions: accept one, claim it for grading, record its result. These flush, never commit."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.models import Submission, SubmissionStatus, utc_now
from graders.exercises import UnknownExercise, get_exercise, list_exercises
from graders.report import GradeReport

MAX_LEARNER_CHARS = 255


class SubmissionRejected(ValueError):
    """The submission breaks a rule; the message says which, and how to fix it."""


class CodeTooLarge(SubmissionRejected):
    """The code is over the size limit."""


class UnknownExerciseId(SubmissionRejected):
    """No exercise has the id the submission names."""


def _check_text(field: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SubmissionRejected(
            f"{field} is not valid Unicode text (a lone surrogate at character {exc.start})"
        ) from None
    nul_at = value.find("\0")
    if nul_at != -1:
        raise SubmissionRejected(
            f"{field} contains a NUL character (\\u0000) at character {nul_at}; remove it"
        )


def create_submission(
    session: Session,
    *,
    exercise_id: str,
    learner: str,
    code: str,
    max_code_bytes: int,
    api_key_id: str | None = None,
) -> Submission:
    """Validate and store a queued submission. Raises SubmissionRejected (or a subclass)."""
    try:
        exercise = get_exercise(exercise_id)
    except UnknownExercise:
        known = ", ".join(exercise.id for exercise in list_exercises())
        raise UnknownExerciseId(
            f"unknown exercise {exercise_id!r}; known exercises: {known}"
        ) from None

    _check_text("code", code)
    code_bytes = len(code.encode("utf-8"))
    if code_bytes > max_code_bytes:
        raise CodeTooLarge(
            f"code is {code_bytes} bytes; the limit is {max_code_bytes} bytes "
            f"({max_code_bytes // 1024} KiB)"
        )
    if not code.strip():
        raise SubmissionRejected(f"code is empty: paste your {exercise.entry_point} function")

    _check_text("learner", learner)
    if not learner.strip():
        raise SubmissionRejected("learner is empty: send the learner's id in your system")
    if len(learner) > MAX_LEARNER_CHARS:
        raise SubmissionRejected(
            f"learner is {len(learner)} characters; the limit is {MAX_LEARNER_CHARS}"
        )

    submission = Submission(
        exercise_id=exercise.id,
        exercise_version=exercise.version,
        learner=learner,
        code=code,
        status=SubmissionStatus.QUEUED,
        attempts=0,
        api_key_id=api_key_id,
    )
    session.add(submission)
    session.flush()
    return submission


def get_submission(session: Session, submission_id: str) -> Submission | None:
    return session.get(Submission, submission_id)


@dataclass(frozen=True)
class GradingJob:
    """What a worker needs to grade one claimed submission. `attempt` fences late writes."""

    submission_id: str
    exercise_id: str
    code: str
    attempt: int


def claim_submission(session: Session, submission_id: str) -> GradingJob | None:
    """Mark a queued submission running, atomically; None if it is not queued (any more)."""
    row = session.execute(
        update(Submission)
        .where(Submission.id == submission_id, Submission.status == SubmissionStatus.QUEUED)
        .values(
            status=SubmissionStatus.RUNNING,
            started_at=utc_now(),
            attempts=Submission.attempts + 1,
        )
        .returning(Submission.exercise_id, Submission.code, Submission.attempts)
        .execution_options(synchronize_session=False)
    ).one_or_none()
    if row is None:
        return None
    return GradingJob(submission_id, row.exercise_id, row.code, row.attempts)


def _finish(session: Session, job: GradingJob, **values: object) -> bool:
    # Only the claim that is still current may write: a stale worker's late result is dropped.
    result = session.execute(
        update(Submission)
        .where(
            Submission.id == job.submission_id,
            Submission.status == SubmissionStatus.RUNNING,
            Submission.attempts == job.attempt,
        )
        .values(**values)
        .returning(Submission.id)
        .execution_options(synchronize_session=False)
    )
    return result.one_or_none() is not None


def record_report(session: Session, job: GradingJob, report: GradeReport) -> bool:
    """Store the grader's result and mark the submission graded; False if the claim is stale."""
    return _finish(
        session,
        job,
        status=SubmissionStatus.GRADED,
        graded_at=utc_now(),
        # The version graded against, which after a restart may be newer than the submitted one.
        exercise_version=report.exercise_version,
        score=report.score,
        max_score=report.max_score,
        diagnosis=report.diagnosis,
        checks=[check.model_dump(mode="json") for check in report.checks],
        feedback=report.feedback,
        plots=[plot.model_dump(mode="json") for plot in report.plots],
        output=report.output,
        error_message=None,
    )


def record_error(session: Session, job: GradingJob, message: str) -> bool:
    """Mark the submission failed by a server fault; False if the claim is stale."""
    return _finish(session, job, status=SubmissionStatus.ERROR, error_message=message)


def requeue_unfinished(session: Session) -> list[str]:
    """Put back submissions a crash left running; return every queued id, oldest first.

    Only for a process's start, while none of its own workers run: with one server process
    a `running` row at start was orphaned by a crash. Several grading hosts will need leases.
    """
    session.execute(
        update(Submission)
        .where(Submission.status == SubmissionStatus.RUNNING)
        .values(status=SubmissionStatus.QUEUED)
        .execution_options(synchronize_session=False)
    )
    return list(
        session.scalars(
            select(Submission.id)
            .where(Submission.status == SubmissionStatus.QUEUED)
            .order_by(Submission.created_at)
        )
    )
