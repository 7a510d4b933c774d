"""A course's exercise list: which exercises it sets, in what order, under which units.

An exercise removed from a course is kept (`Assignment.removed_at`): its submissions, grades and
policies stay, learners no longer see it, the gradebook marks it, and adding it back restores
it. The order and units are the course's own once an instructor sets them, else the exercises'
(`position` and `unit` in exercise.toml). Every change is audited. These flush, never commit.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.courses.membership import CourseError, assignments_of, remove_assignment
from app.models import Assignment, Course, User
from graders.exercise import MAX_UNIT_CHARS
from graders.exercises import UnknownExercise, get_exercise


def _row(session: Session, course: Course, exercise_id: str) -> Assignment | None:
    return session.scalars(
        select(Assignment).where(
            Assignment.course_id == course.id, Assignment.exercise_id == exercise_id
        )
    ).one_or_none()


def add_exercise(session: Session, *, course: Course, exercise_id: str, by: User) -> None:
    """Set the exercise in the course, last; one removed before comes back as it was."""
    try:
        get_exercise(exercise_id)
    except UnknownExercise:
        raise CourseError(f"there is no exercise {exercise_id[:100]!r}") from None
    row = _row(session, course, exercise_id)
    if row is not None and row.removed_at is None:
        raise CourseError(f"the course sets {exercise_id!r} already")
    if row is None:
        row = Assignment(course_id=course.id, exercise_id=exercise_id)
        session.add(row)
    row.removed_at = None
    session.flush()
    others = [a.id for a in assignments_of(session, course.id) if a.id != exercise_id]
    _renumber(session, course, [*others, exercise_id])
    record_event(
        session, actor=by, action=AuditAction.ASSIGNMENT_SET, course_id=course.id,
        exercise=exercise_id, due_at=row.due_at.isoformat() if row.due_at else None,
        late_policy=row.late_policy, scoring_policy=row.scoring_policy,
        late_penalty_percent_per_day=row.late_penalty_percent_per_day,
    )  # fmt: skip


def remove_exercise(session: Session, *, course: Course, exercise_id: str, by: User) -> None:
    """Take the exercise out of the course, keeping its submissions, grades and policies."""
    row = _row(session, course, exercise_id)
    if row is None or row.removed_at is not None:
        raise CourseError(f"the course does not set {exercise_id[:100]!r}")
    remove_assignment(row)
    session.flush()
    record_event(
        session, actor=by, action=AuditAction.ASSIGNMENT_REMOVED, course_id=course.id,
        exercise=exercise_id,
    )  # fmt: skip


def move_exercise(
    session: Session, *, course: Course, exercise_id: str, to_position: int, by: User
) -> None:
    """Put the exercise at this place (from 1) in the course's order; the others keep theirs."""
    ids = [a.id for a in assignments_of(session, course.id)]
    if exercise_id not in ids:
        raise CourseError(f"the course does not set {exercise_id[:100]!r}")
    if not 1 <= to_position <= len(ids):
        raise CourseError(f"the place is a number from 1 to {len(ids)}")
    ids.remove(exercise_id)
    ids.insert(to_position - 1, exercise_id)
    _renumber(session, course, ids)
    record_event(
        session, actor=by, action=AuditAction.EXERCISE_LIST_CHANGED, course_id=course.id,
        exercise=exercise_id, position=to_position,
    )  # fmt: skip


def set_unit(session: Session, *, course: Course, exercise_id: str, unit: str, by: User) -> None:
    """List the exercise under this unit in the course; blank: the exercise's own unit."""
    unit = " ".join(unit.split())
    if len(unit) > MAX_UNIT_CHARS:
        raise CourseError(f"a unit's name may have at most {MAX_UNIT_CHARS} characters")
    row = _row(session, course, exercise_id)
    if row is None or row.removed_at is not None:
        raise CourseError(f"the course does not set {exercise_id[:100]!r}")
    if (row.unit or "") == unit:
        return
    row.unit = unit or None
    session.flush()
    record_event(
        session, actor=by, action=AuditAction.EXERCISE_LIST_CHANGED, course_id=course.id,
        exercise=exercise_id, unit=unit or "(the exercise's own)",
    )  # fmt: skip


def save_exercise_list(
    session: Session, *, course: Course, order: list[str], units: list[str], by: User
) -> bool:
    """The settings page's list: every exercise the course sets, in the order wanted, with its
    unit. True when anything changed."""
    assigned = assignments_of(session, course.id)
    if sorted(order) != sorted(a.id for a in assigned) or len(units) != len(order):
        raise CourseError("the exercise list was out of date: reload the page")
    changed = order != [a.id for a in assigned]
    if changed:
        _renumber(session, course, order)
        record_event(
            session, actor=by, action=AuditAction.EXERCISE_LIST_CHANGED, course_id=course.id,
            order=", ".join(order),
        )  # fmt: skip
    by_id = {a.id: a for a in assigned}
    for exercise_id, unit in zip(order, units, strict=True):
        unit = " ".join(unit.split())
        if unit != by_id[exercise_id].unit:
            # The exercise's own unit typed back is no choice of the course's.
            wanted = "" if unit == by_id[exercise_id].exercise.unit else unit
            set_unit(session, course=course, exercise_id=exercise_id, unit=wanted, by=by)
            changed = True
    return changed


def _renumber(session: Session, course: Course, ids: list[str]) -> None:
    for position, exercise_id in enumerate(ids, start=1):
        row = _row(session, course, exercise_id)
        assert row is not None
        row.position = position
    session.flush()
