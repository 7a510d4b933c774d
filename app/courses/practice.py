"""Practice is work outside any course: it counts in no gradebook. A signed-in learner who is
enrolled in a course that sets the same exercise is pointed to the course's exercise, where the
course's rules (due date, attempts, rate limits) apply to whatever they submit."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.courses.counted import Cell
from app.courses.gradebook import learner_cells
from app.courses.membership import AssignedExercise, assignments_of
from app.models import Course, CourseRole, Enrolment


@dataclass(frozen=True)
class CourseExercise:
    """An exercise as a course the learner is enrolled in sets it, and their standing there."""

    course: Course
    assigned: AssignedExercise
    cell: Cell

    @property
    def url(self) -> str:
        return f"/courses/{self.course.id}/exercises/{self.assigned.id}"


def courses_setting(session: Session, user_id: str | None) -> dict[str, list[CourseExercise]]:
    """For each exercise id, the courses where the user is enrolled as a learner that set it,
    by course name. Instructors are not steered: their practice is trying the exercise out."""
    if user_id is None:
        return {}
    courses = session.scalars(
        select(Course)
        .join(Enrolment, Enrolment.course_id == Course.id)
        .where(Enrolment.user_id == user_id, Enrolment.role == CourseRole.LEARNER)
        .order_by(Course.name)
    )
    by_exercise: dict[str, list[CourseExercise]] = {}
    for course in courses:
        assigned = assignments_of(session, course.id)
        cells = learner_cells(session, assigned, course_id=course.id, user_id=user_id)
        for one, cell in zip(assigned, cells, strict=True):
            by_exercise.setdefault(one.id, []).append(CourseExercise(course, one, cell))
    return by_exercise
