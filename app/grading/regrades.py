"""Grading submissions again (after an exercise changed), keeping the old and new results.

`request_regrade` and `request_exercise_regrade` put submissions back in the queue, each with
a Regrade row holding its result before; the worker fills in the result after
(jobs.record_report). The caller enqueues the returned ids after its commit.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.errors import AppError
from app.grading.submissions import queue_for_grading
from app.models import (
    FINISHED,
    Regrade,
    RegradeReason,
    Submission,
    SubmissionStatus,
    User,
    new_id,
    utc_now,
)
from graders.exercises import get_exercise


class RegradeRejected(AppError, ValueError):
    """Nothing to regrade, or the submission is being graded already."""

    status_code = 409
    title = "Nothing to regrade"


MAX_NOTE_CHARS = 500


def _queue_again(
    session: Session,
    submission: Submission,
    batch_id: str,
    by: User,
    reason: RegradeReason,
    note: str | None,
) -> None:
    session.add(
        Regrade(
            batch_id=batch_id,
            reason=reason,
            note=note,
            submission_id=submission.id,
            requested_by_id=by.id,
            old_status=submission.status,
            old_score=submission.score,
            old_max_score=submission.max_score,
            old_diagnosis=submission.diagnosis,
            old_exercise_version=submission.exercise_version,
        )
    )
    # The old result stays on the row (and in the Regrade) until the new one replaces it.
    submission.status = SubmissionStatus.QUEUED
    submission.queued_at = utc_now()
    queue_for_grading(session, submission.id)


def _checked_note(note: str) -> str:
    note = note.strip()
    if len(note) > MAX_NOTE_CHARS:
        raise RegradeRejected(f"the note may have at most {MAX_NOTE_CHARS} characters")
    return note


def request_regrade(
    session: Session,
    submission: Submission,
    *,
    by: User,
    reason: RegradeReason,
    note: str = "",
) -> str:
    """Queue one graded submission again; returns the batch id."""
    note = _checked_note(note)
    if submission.status not in FINISHED:
        raise RegradeRejected("this submission is being graded already")
    batch_id = new_id()
    _queue_again(session, submission, batch_id, by, reason, note or None)
    record_event(
        session,
        actor=by,
        action=AuditAction.REGRADE_SUBMISSION,
        course_id=submission.course_id,
        submission_id=submission.id,
        batch_id=batch_id,
        old_score=submission.score,
        old_exercise_version=submission.exercise_version,
        reason=reason,
        note=note or None,
    )
    session.flush()
    return batch_id


def regrade_candidates(
    session: Session, *, course_id: str, exercise_id: str, only_outdated: bool
) -> list[Submission]:
    """What a regrade of the exercise would run: its finished submissions in the course (or
    only those graded against an older version of it), oldest first."""
    current = get_exercise(exercise_id).version
    query = select(Submission).where(
        Submission.course_id == course_id,
        Submission.exercise_id == exercise_id,
        Submission.status.in_(FINISHED),
    )
    if only_outdated:
        query = query.where(Submission.exercise_version != current)
    return list(session.scalars(query.order_by(Submission.created_at)))


def submissions_to_regrade(
    session: Session, *, course_id: str, exercise_id: str, only_outdated: bool
) -> list[Submission]:
    """The regrade's candidates; RegradeRejected when there are none."""
    submissions = regrade_candidates(
        session, course_id=course_id, exercise_id=exercise_id, only_outdated=only_outdated
    )
    if not submissions:
        raise RegradeRejected(
            "every submission is already graded against the current version"
            if only_outdated
            else "there are no graded submissions to regrade"
        )
    return submissions


def request_exercise_regrade(
    session: Session,
    *,
    course_id: str,
    exercise_id: str,
    only_outdated: bool,
    by: User,
    reason: RegradeReason,
    note: str = "",
) -> tuple[str, list[str]]:
    """Queue every finished submission of an exercise in a course again (or only those graded
    against an older version of it); returns the batch id and the submission ids."""
    note = _checked_note(note)
    current = get_exercise(exercise_id).version
    submissions = submissions_to_regrade(
        session, course_id=course_id, exercise_id=exercise_id, only_outdated=only_outdated
    )
    batch_id = new_id()
    for submission in submissions:
        _queue_again(session, submission, batch_id, by, reason, note or None)
    record_event(
        session,
        actor=by,
        action=AuditAction.REGRADE_EXERCISE,
        course_id=course_id,
        exercise=exercise_id,
        batch_id=batch_id,
        submissions=len(submissions),
        only_outdated=only_outdated,
        version=current,
        reason=reason,
        note=note or None,
    )
    session.flush()
    return batch_id, [submission.id for submission in submissions]


def outdated_count(session: Session, *, course_id: str, exercise_id: str) -> int:
    """Finished submissions graded against another version than the exercise's current one."""
    current = get_exercise(exercise_id).version
    return (
        session.scalar(
            select(func.count())
            .select_from(Submission)
            .where(
                Submission.course_id == course_id,
                Submission.exercise_id == exercise_id,
                Submission.status.in_(FINISHED),
                Submission.exercise_version != current,
            )
        )
        or 0
    )


@dataclass(frozen=True)
class RegradeProgress:
    batch_id: str
    total: int
    finished: int
    changed: int
    rows: list[tuple[Regrade, Submission]]

    @property
    def done(self) -> bool:
        return self.finished == self.total


def regrade_progress(session: Session, batch_id: str) -> RegradeProgress | None:
    rows = session.execute(
        select(Regrade, Submission)
        .join(Submission, Submission.id == Regrade.submission_id)
        .where(Regrade.batch_id == batch_id)
        .order_by(Regrade.requested_at, Submission.created_at)
    ).all()
    if not rows:
        return None
    pairs = [(regrade, submission) for regrade, submission in rows]
    finished = [r for r, _ in pairs if r.finished_at is not None]
    changed = [r for r in finished if r.changed]
    return RegradeProgress(batch_id, len(pairs), len(finished), len(changed), pairs)


def regrades_of(session: Session, submission_id: str) -> list[Regrade]:
    return list(
        session.scalars(
            select(Regrade)
            .where(Regrade.submission_id == submission_id)
            .order_by(Regrade.requested_at.desc())
        )
    )


def changed_by_regrade(session: Session, submission_ids: list[str]) -> dict[str, Regrade]:
    """The latest finished regrade of each of these submissions, where it changed the result."""
    if not submission_ids:
        return {}
    latest: dict[str, Regrade] = {}
    for regrade in session.scalars(
        select(Regrade)
        .where(Regrade.submission_id.in_(submission_ids), Regrade.finished_at.is_not(None))
        .order_by(Regrade.finished_at)
    ):
        latest[regrade.submission_id] = regrade
    return {sid: regrade for sid, regrade in latest.items() if regrade.changed}
