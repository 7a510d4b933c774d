"""Per-exercise limits (attempts, a timed attempt) and per-learner extensions of them.

An instructor sets an exercise's attempt limit and time limit for the whole course, and gives one
learner their own terms on top: a later due date, extra attempts, extra minutes. What a change
does (each value old -> new, and the learner's counted score old -> new: a later due date can
lift a late penalty) is shown before it is saved and kept in the audit log. Where they apply:
`AssignedExercise` (app/courses/membership.py) and `check_open` (app/grading/submissions.py).
These flush, never commit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.courses.counted import score_cell
from app.courses.membership import AssignedExercise, assignment_of
from app.errors import AppError
from app.models import Assignment, Extension, Submission, User
from app.outbox import ScoreChange, report_score_change

# Bounds that catch a typo (an extra zero) rather than express a policy.
MAX_ATTEMPTS = 1000
MAX_MINUTES = 7 * 24 * 60


class LimitRejected(AppError, ValueError):
    """A limit or an extension that cannot be set; the message says why."""

    status_code = 422
    title = "Not changed"


def check_count(value: int | None, *, what: str, least: int, most: int) -> int | None:
    """A limit as given (None: none); LimitRejected unless `least` <= value <= `most`."""
    if value is not None and not least <= value <= most:
        raise LimitRejected(f"{what} is a whole number from {least} to {most}")
    return value


def _when(moment: datetime | None, none: str) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else none


def _count(value: int | None, none: str, unit: str = "") -> str:
    return none if value is None else f"{value}{unit}"


@dataclass(frozen=True)
class ExtensionChange:
    """What giving one learner these terms changes, each as "what: old → new"."""

    changes: list[str]
    counted_before: float | None
    counted_after: float | None
    latest_submission_id: str | None  # the learner's, to send a changed counted score on

    @property
    def counted_sentence(self) -> str:
        before, after = (
            "nothing" if v is None else f"{v:g}" for v in (self.counted_before, self.counted_after)
        )
        if before == after:
            return f"The learner's counted score does not change ({after})."
        return f"The learner's counted score changes from {before} to {after}."


def extension_change(
    session: Session,
    *,
    course_id: str,
    exercise_id: str,
    learner: User,
    due_at: datetime | None,
    extra_attempts: int,
    extra_minutes: int,
) -> ExtensionChange:
    """What these terms would change for `learner` (nothing is stored)."""
    before = assignment_of(session, course_id, exercise_id, learner.id)
    terms = Extension(due_at=due_at, extra_attempts=extra_attempts, extra_minutes=extra_minutes)
    after = replace(before, extension=terms)
    changes = []
    if before.due_at != after.due_at:
        changes.append(f"due {_when(before.due_at, 'never')} → {_when(after.due_at, 'never')}")
    if before.max_attempts != after.max_attempts:
        changes.append(
            f"attempts allowed {_count(before.max_attempts, 'no limit')} → "
            f"{_count(after.max_attempts, 'no limit')}"
        )
    if before.time_limit_minutes != after.time_limit_minutes:
        changes.append(
            f"time limit {_count(before.time_limit_minutes, 'untimed', ' min')} → "
            f"{_count(after.time_limit_minutes, 'untimed', ' min')}"
        )
    theirs = list(
        session.scalars(
            select(Submission)
            .where(
                Submission.course_id == course_id,
                Submission.exercise_id == exercise_id,
                Submission.user_id == learner.id,
            )
            .order_by(Submission.created_at)
        )
    )
    return ExtensionChange(
        changes,
        score_cell(before, theirs).score,
        score_cell(after, theirs).score,
        theirs[-1].id if theirs else None,
    )


MAX_DAYS_LATER = 365


def accommodation_due(assigned: AssignedExercise, days_later: int) -> datetime | None:
    """The due date an accommodation list gives for one exercise: the course's, `days_later`
    days later (None: the course's own, for 0 days or an undated exercise)."""
    check_count(days_later, what="days later", least=0, most=MAX_DAYS_LATER)
    due_at = assigned.assignment.due_at
    if not days_later or due_at is None:
        return None
    return due_at + timedelta(days=days_later)


def set_extension(
    session: Session,
    *,
    course_id: str,
    exercise_id: str,
    learner: User,
    due_at: datetime | None,
    extra_attempts: int,
    extra_minutes: int,
    by: User,
) -> ExtensionChange:
    """Give `learner` these terms for the exercise (the course's own when all are default);
    audited with what changed. LimitRejected for numbers out of bounds."""
    check_count(extra_attempts, what="extra attempts", least=0, most=MAX_ATTEMPTS)
    check_count(extra_minutes, what="extra minutes", least=0, most=MAX_MINUTES)
    change = extension_change(
        session,
        course_id=course_id,
        exercise_id=exercise_id,
        learner=learner,
        due_at=due_at,
        extra_attempts=extra_attempts,
        extra_minutes=extra_minutes,
    )
    row = session.scalars(
        select(Extension).where(
            Extension.course_id == course_id,
            Extension.exercise_id == exercise_id,
            Extension.user_id == learner.id,
        )
    ).one_or_none()
    if due_at is None and extra_attempts == 0 and extra_minutes == 0:
        if row is not None:
            session.delete(row)
    else:
        if row is None:
            row = Extension(course_id=course_id, exercise_id=exercise_id, user_id=learner.id)
            session.add(row)
        row.due_at, row.extra_attempts, row.extra_minutes = due_at, extra_attempts, extra_minutes
        row.granted_by_id = by.id
    if change.changes:
        record_event(
            session,
            actor=by,
            action=AuditAction.EXTENSION_SET,
            course_id=course_id,
            exercise=exercise_id,
            learner=learner.name,
            learner_email=learner.email,
            changes=change.changes,
            counted_before=change.counted_before,
            counted_after=change.counted_after,
        )
    session.flush()
    if change.counted_before != change.counted_after and change.latest_submission_id:
        # The LMS holds the counted score: it is sent again, as after an override.
        report_score_change(session, ScoreChange.EXTENDED, change.latest_submission_id)
    return change


def set_limits(
    session: Session,
    assigned: AssignedExercise,
    *,
    max_attempts: int | None,
    time_limit_minutes: int | None,
    by: User,
) -> list[str]:
    """Set the exercise's attempt limit and timed attempt for the course (None: none); audited.
    Returns what changed, each as "what: old → new"."""
    check_count(max_attempts, what="the attempt limit", least=1, most=MAX_ATTEMPTS)
    check_count(time_limit_minutes, what="the time limit in minutes", least=1, most=MAX_MINUTES)
    row: Assignment = assigned.assignment
    changes = []
    if row.max_attempts != max_attempts:
        changes.append(
            f"attempts allowed {_count(row.max_attempts, 'no limit')} → "
            f"{_count(max_attempts, 'no limit')}"
        )
    if row.time_limit_minutes != time_limit_minutes:
        changes.append(
            f"time limit {_count(row.time_limit_minutes, 'untimed', ' min')} → "
            f"{_count(time_limit_minutes, 'untimed', ' min')}"
        )
    if changes:
        row.max_attempts, row.time_limit_minutes = max_attempts, time_limit_minutes
        record_event(
            session,
            actor=by,
            action=AuditAction.LIMITS_SET,
            course_id=row.course_id,
            exercise=assigned.id,
            changes=changes,
        )
        session.flush()
    return changes
