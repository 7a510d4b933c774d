"""Courses: join codes, enrolments and roles, assignments with their policies, who may see what.

These flush, never commit.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.errors import AppError
from app.models import (
    Assignment,
    Course,
    CourseRole,
    Enrolment,
    Extension,
    LatePolicy,
    ScoringPolicy,
    SiteRole,
    Submission,
    User,
    utc_now,
)
from graders.exercises import Exercise, UnknownExercise, get_exercise, list_exercises

# No 0/O or 1/I/L: join codes are read aloud and copied from slides.
JOIN_CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
JOIN_CODE_LENGTH = 8
MAX_COURSE_NAME_CHARS = 200


class CourseError(AppError, ValueError):
    """A request about a course that cannot be done; the message says why."""

    status_code = 422
    title = "Not done"


class NotFound(AppError, LookupError):
    """No such thing, or not one this user may know of."""

    status_code = 404
    title = "Not found"


class Forbidden(AppError, PermissionError):
    """This user may see the thing but not do this with it."""

    status_code = 403
    title = "Not allowed"


def new_join_code() -> str:
    return "".join(secrets.choice(JOIN_CODE_ALPHABET) for _ in range(JOIN_CODE_LENGTH))


def normalize_join_code(code: str) -> str:
    return "".join(code.split()).replace("-", "").upper()


def create_course(session: Session, *, name: str, instructor: User) -> Course:
    """A course taught by `instructor`, with a fresh join code and the unit's exercises set."""
    name = " ".join(name.split())
    if not name:
        raise CourseError("the course needs a name")
    if len(name) > MAX_COURSE_NAME_CHARS:
        raise CourseError(f"the name may have at most {MAX_COURSE_NAME_CHARS} characters")
    course = Course(name=name, join_code=new_join_code(), created_by_id=instructor.id)
    session.add(course)
    session.flush()
    session.add(Enrolment(course_id=course.id, user_id=instructor.id, role=CourseRole.INSTRUCTOR))
    # The whole unit, undated: what almost every course wants; the settings page changes it.
    for exercise in list_exercises():
        session.add(Assignment(course_id=course.id, exercise_id=exercise.id))
    session.flush()
    return course


def find_course(session: Session, id_or_join_code: str) -> Course | None:
    """A course by its id or its join code (as operators type either)."""
    course = session.get(Course, id_or_join_code)
    if course is not None:
        return course
    return session.scalars(
        select(Course).where(Course.join_code == normalize_join_code(id_or_join_code))
    ).one_or_none()


def join_course(session: Session, *, user: User, join_code: str) -> Course:
    """Enrol `user` as a learner in the course with this code (nothing changes if already in)."""
    code = normalize_join_code(join_code)
    course = session.scalars(select(Course).where(Course.join_code == code)).one_or_none()
    if course is None:
        raise CourseError(
            f"no course has the join code {code or join_code!r}: check it with your instructor"
        )
    if enrolment_of(session, user, course.id) is None:
        session.add(Enrolment(course_id=course.id, user_id=user.id, role=CourseRole.LEARNER))
        session.flush()
    return course


def add_instructor(session: Session, *, course: Course, user: User) -> None:
    enrolment = enrolment_of(session, user, course.id)
    if enrolment is None:
        session.add(Enrolment(course_id=course.id, user_id=user.id, role=CourseRole.INSTRUCTOR))
    else:
        enrolment.role = CourseRole.INSTRUCTOR
    session.flush()


class StaffChange(enum.StrEnum):
    """What an instructor may do to another member of the course's staff."""

    MAKE_LEARNER = "make-learner"
    REMOVE = "remove"


def change_staff(
    session: Session, *, course: Course, user: User, change: StaffChange, by: User
) -> None:
    """`by` makes an instructor of the course a learner of it, or takes them out of it. Refused
    (CourseError) when either is not its instructor, or `user` is its last one.

    Two changes at once are made one after the other (`lock_course`), each reading the staff
    as the other left it: two instructors demoting each other at the same moment cannot both
    succeed, and a course always keeps one."""
    lock_course(session, course.id)
    if (
        by.site_role != SiteRole.ADMIN
        and _role_now(session, by, course.id) != CourseRole.INSTRUCTOR
    ):
        raise CourseError("you are no longer an instructor of this course: reload the page")
    enrolment = _enrolment_now(session, user, course.id)
    if enrolment is None or enrolment.role != CourseRole.INSTRUCTOR:
        # Not begun with the email: the page's sentence would capitalise it.
        raise CourseError(f"the account {user.email} is not an instructor of this course")
    instructors = session.scalar(
        select(func.count()).where(
            Enrolment.course_id == course.id, Enrolment.role == CourseRole.INSTRUCTOR
        )
    )
    if instructors == 1:
        raise CourseError(
            f"the course's only instructor is {user.email}: add another instructor first"
        )
    if change == StaffChange.REMOVE:
        session.delete(enrolment)
    else:
        enrolment.role = CourseRole.LEARNER
    session.flush()


def lock_course(session: Session, course_id: str) -> None:
    """Hold the course until this transaction ends, so that a second change to its staff waits
    for this one's commit and then reads what it wrote. A write that changes nothing: on
    PostgreSQL it locks the course's row; on SQLite it takes the database's write lock, which
    SQLite keeps to the end of the transaction. Call it before reading what it guards."""
    session.execute(
        update(Course)
        .where(Course.id == course_id)
        .values(name=Course.name)
        .execution_options(synchronize_session=False)
    )


def _enrolment_now(session: Session, user: User, course_id: str) -> Enrolment | None:
    """The enrolment as the database has it now, not as this session read it earlier."""
    return session.scalars(
        select(Enrolment)
        .where(Enrolment.course_id == course_id, Enrolment.user_id == user.id)
        .execution_options(populate_existing=True)
    ).one_or_none()


def _role_now(session: Session, user: User, course_id: str) -> CourseRole | None:
    enrolment = _enrolment_now(session, user, course_id)
    return CourseRole(enrolment.role) if enrolment else None


def new_course_join_code(session: Session, course: Course) -> str:
    """Replace the join code (the old one stops working; enrolled learners stay)."""
    course.join_code = new_join_code()
    session.flush()
    return course.join_code


def enrolment_of(session: Session, user: User, course_id: str) -> Enrolment | None:
    return session.scalars(
        select(Enrolment).where(Enrolment.course_id == course_id, Enrolment.user_id == user.id)
    ).one_or_none()


def course_role(session: Session, user: User | None, course_id: str) -> CourseRole | None:
    """The user's role in the course; a site admin is an instructor of every course."""
    if user is None:
        return None
    if user.site_role == SiteRole.ADMIN:
        return CourseRole.INSTRUCTOR
    enrolment = enrolment_of(session, user, course_id)
    return CourseRole(enrolment.role) if enrolment else None


def require_member(session: Session, user: User, course_id: str) -> tuple[Course, CourseRole]:
    """The course and the user's role in it; NotFound when they are not in it."""
    course = session.get(Course, course_id)
    role = course_role(session, user, course_id) if course else None
    if course is None or role is None:
        raise NotFound("There is no such course, or you are not enrolled in it.")
    return course, role


def require_instructor(session: Session, user: User, course_id: str) -> Course:
    course, role = require_member(session, user, course_id)
    if role != CourseRole.INSTRUCTOR:
        raise Forbidden("Only the course's instructors can see this page.")
    return course


@dataclass(frozen=True)
class CourseOfUser:
    course: Course
    role: CourseRole


def courses_of(session: Session, user: User) -> list[CourseOfUser]:
    """Every course the user is in (an admin: every course), by name."""
    if user.site_role == SiteRole.ADMIN:
        courses = session.scalars(select(Course).order_by(Course.name)).all()
        return [CourseOfUser(course, CourseRole.INSTRUCTOR) for course in courses]
    rows = session.execute(
        select(Course, Enrolment.role)
        .join(Enrolment, Enrolment.course_id == Course.id)
        .where(Enrolment.user_id == user.id)
        .order_by(Course.name)
    ).all()
    return [CourseOfUser(course, CourseRole(role)) for course, role in rows]


def members(session: Session, course_id: str, role: CourseRole) -> list[User]:
    return list(
        session.scalars(
            select(User)
            .join(Enrolment, Enrolment.user_id == User.id)
            .where(Enrolment.course_id == course_id, Enrolment.role == role)
            .order_by(User.name, User.email)
        )
    )


@dataclass(frozen=True)
class AssignedExercise:
    """An exercise as set in a course; with an extension, as set for that one learner
    (app/courses/extensions.py)."""

    exercise: Exercise
    assignment: Assignment
    extension: Extension | None = None

    @property
    def id(self) -> str:
        return self.exercise.id

    @property
    def due_at(self) -> datetime | None:
        """The due date that counts: the learner's own when an extension moved it."""
        if self.extension is not None and self.extension.due_at is not None:
            return self.extension.due_at
        return self.assignment.due_at

    @property
    def due_extended(self) -> bool:
        return self.extension is not None and self.extension.due_at is not None

    @property
    def max_attempts(self) -> int | None:
        """Submissions the learner may make; None: no limit."""
        limit = self.assignment.max_attempts
        if limit is None:
            return None
        return limit + (self.extension.extra_attempts if self.extension else 0)

    @property
    def time_limit_minutes(self) -> int | None:
        """Minutes from the learner's first open; None: untimed."""
        limit = self.assignment.time_limit_minutes
        if limit is None:
            return None
        return limit + (self.extension.extra_minutes if self.extension else 0)

    def solution_released(self, now: datetime) -> bool:
        """Whether the learner may read the reference solution: the course shows it after the
        due date, and that date has passed for them. Never before the course's due date (nor
        for an undated exercise), never while their own extended due date is still ahead."""
        course_due = self.assignment.due_at
        if not self.assignment.show_solution_after_due or course_due is None:
            return False
        own_due = self.due_at or course_due
        return now > course_due and now > own_due

    def released_solution(self, now: datetime) -> str | None:
        """The reference solution's code once released to this learner (`solution_released`),
        else None: what the exercise page, the learner's API and the client show."""
        return self.exercise.solution_code if self.solution_released(now) else None

    @property
    def unit(self) -> str:
        """The unit the course lists it under: its own choice, else the exercise's."""
        return self.assignment.unit or self.exercise.unit

    @property
    def order(self) -> tuple[int, int]:
        return (
            self.assignment.position
            if self.assignment.position is not None
            else self.exercise.position,
            self.exercise.position,
        )


def assignments_of(
    session: Session, course_id: str, learner_id: str | None = None, *, removed: bool = False
) -> list[AssignedExercise]:
    """The course's exercises in its order (an exercise no longer installed is left out); with
    `learner_id` (an account), as set for that learner: with their extensions; with `removed`,
    those removed from it instead (hidden from learners, their submissions kept)."""
    extensions = extensions_of(session, course_id, learner_id) if learner_id else {}
    assigned = []
    rows = session.scalars(
        select(Assignment).where(
            Assignment.course_id == course_id,
            Assignment.removed_at.is_not(None) if removed else Assignment.removed_at.is_(None),
        )
    )
    for assignment in rows:
        try:
            exercise = get_exercise(assignment.exercise_id)
        except UnknownExercise:
            continue
        extension = extensions.get((learner_id or "", exercise.id))
        assigned.append(AssignedExercise(exercise, assignment, extension))
    # Listed unit by unit, each unit where its first exercise is: every page numbers alike.
    return [one for _, unit in in_units(sorted(assigned, key=lambda a: a.order)) for one in unit]


Listed = TypeVar("Listed")


def in_units(
    items: Iterable[Listed], unit_of: Callable[[Listed], str] = attrgetter("unit")
) -> list[tuple[str, list[Listed]]]:
    """The exercises (or rows about them) grouped by unit, each unit where its first exercise
    is in the order."""
    units: dict[str, list[Listed]] = {}
    for item in items:
        units.setdefault(unit_of(item), []).append(item)
    return list(units.items())


def extensions_of(
    session: Session, course_id: str, learner_id: str | None = None
) -> dict[tuple[str, str], Extension]:
    """The course's extensions (only one learner's with `learner_id`) by (user id, exercise)."""
    query = select(Extension).where(Extension.course_id == course_id)
    if learner_id is not None:
        query = query.where(Extension.user_id == learner_id)
    return {(e.user_id, e.exercise_id): e for e in session.scalars(query)}


def assignment_of(
    session: Session, course_id: str, exercise_id: str, learner_id: str | None = None
) -> AssignedExercise:
    """One exercise of the course (for `learner_id`: with their extension); NotFound when the
    course does not set it."""
    for assigned in assignments_of(session, course_id, learner_id):
        if assigned.id == exercise_id:
            return assigned
    raise NotFound(f"This course does not set the exercise “{exercise_id}”.")


def set_assignment(
    session: Session,
    *,
    course_id: str,
    exercise_id: str,
    assigned: bool,
    due_at: datetime | None,
    late_policy: LatePolicy,
    late_penalty_percent_per_day: float,
    scoring_policy: ScoringPolicy,
    show_solution_after_due: bool = False,
) -> Assignment | None:
    """Set (or unset) an exercise in a course with its policies; returns the row if set."""
    try:
        get_exercise(exercise_id)
    except UnknownExercise:
        raise CourseError(f"there is no exercise {exercise_id!r}") from None
    if not 0 <= late_penalty_percent_per_day <= 100:
        raise CourseError("the late penalty is a percentage per day, from 0 to 100")
    row = session.scalars(
        select(Assignment).where(
            Assignment.course_id == course_id, Assignment.exercise_id == exercise_id
        )
    ).one_or_none()
    if not assigned:
        if row is not None and row.removed_at is None:
            remove_assignment(row)
            session.flush()
        return None
    if row is None:
        row = Assignment(course_id=course_id, exercise_id=exercise_id)
        session.add(row)
    row.removed_at = None
    row.due_at = due_at
    row.late_policy = late_policy
    row.late_penalty_percent_per_day = late_penalty_percent_per_day
    row.scoring_policy = scoring_policy
    row.show_solution_after_due = show_solution_after_due
    session.flush()
    return row


def remove_assignment(row: Assignment) -> None:
    """Take the exercise out of the course, kept: its submissions, grades and policies stay
    (the gradebook marks it removed) and setting it again restores them."""
    row.removed_at = utc_now()


def can_view_submission(
    session: Session, user: User | None, anonymous_learner: str | None, submission: Submission
) -> bool:
    """The learner who made it, the instructors of its course, a site admin; nobody else."""
    if user is not None:
        if submission.user_id == user.id or user.site_role == SiteRole.ADMIN:
            return True
        if submission.course_id is not None:
            return course_role(session, user, submission.course_id) == CourseRole.INSTRUCTOR
        return False
    # Anonymous practice: the browser whose cookie made it.
    return (
        anonymous_learner is not None
        and submission.user_id is None
        and submission.course_id is None
        and submission.api_key_id is None
        and submission.learner == anonymous_learner
    )
