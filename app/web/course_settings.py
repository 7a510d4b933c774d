"""A course's settings form as pages render it: its fieldsets as saved or as sent, and a due
date read in the browser's time zone. The settings page renders it, and so do the pages
whose forms sit on it (the exercise list, the staff).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy.orm import Session

from app.courses.hints import (
    rules_of,
)
from app.courses.membership import (
    CourseError,
    assignments_of,
    in_units,
    members,
)
from app.models import (
    Course,
    CourseRole,
    LatePolicy,
    ScoringPolicy,
)
from graders.exercise import Exercise
from graders.exercises import list_exercises, refused_exercises


def parse_due(value: str, timezone: str) -> datetime | None:
    """A datetime-local value in the browser's time zone (UTC without JavaScript)."""
    if not value.strip():
        return None
    try:
        zone = ZoneInfo(timezone) if timezone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    try:
        local = datetime.fromisoformat(value.strip())
    except ValueError:
        raise CourseError(f"{value!r} is not a date and time") from None
    if local.tzinfo is None:
        local = local.replace(tzinfo=zone)
    return local.astimezone(UTC)


@dataclass(frozen=True)
class AssignmentFields:
    """One exercise's fieldset on the settings page: as saved, or as sent (with its error)."""

    exercise: Exercise
    assigned: bool
    due_at: str  # the datetime-local value: UTC as saved, or as typed in the sender's zone
    due_at_utc: str  # ISO UTC for time.js to show in the reader's zone ("" for typed values)
    late_policy: str
    late_penalty_percent_per_day: str
    scoring_policy: str
    show_solution: bool = False  # the reference, to learners whose due date has passed
    error: str = ""


def saved_fields(session: Session, course: Course) -> list[AssignmentFields]:
    assigned = {a.id: a.assignment for a in assignments_of(session, course.id)}
    # A removed exercise's kept policies: ticked again, it comes back with them.
    kept = {a.id: a.assignment for a in assignments_of(session, course.id, removed=True)}
    rows = []
    for exercise in list_exercises():
        row = assigned.get(exercise.id) or kept.get(exercise.id)
        due = row.due_at if row else None
        rows.append(
            AssignmentFields(
                exercise=exercise,
                assigned=exercise.id in assigned,
                due_at=due.strftime("%Y-%m-%dT%H:%M") if due else "",
                due_at_utc=due.isoformat() if due else "",
                late_policy=row.late_policy if row else LatePolicy.PENALTY,
                late_penalty_percent_per_day=f"{row.late_penalty_percent_per_day:g}"
                if row
                else "0",
                scoring_policy=row.scoring_policy if row else ScoringPolicy.BEST,
                show_solution=row.show_solution_after_due if row else False,
            )
        )
    return rows


def settings_context(
    session: Session,
    course: Course,
    fields: list[AssignmentFields] | None = None,
    hint_fields: dict[str, object] | None = None,
) -> dict[str, object]:
    rules = rules_of(course)
    return {
        "course": course,
        # The hints fieldset: as saved, or as sent with its error.
        "hint_fields": hint_fields
        or {
            "unlock_attempts": str(rules.unlock_attempts),
            "hide_fix": rules.hide_fix,
            "lesson_url": rules.lesson_url,
            "error": "",
        },
        "fields": fields if fields is not None else saved_fields(session, course),
        "units": in_units(assignments_of(session, course.id)),
        "instructors": members(session, course.id, CourseRole.INSTRUCTOR),
        "learner_count": len(members(session, course.id, CourseRole.LEARNER)),
        # Exercise folders this server does not serve, with why: the operator's to fix.
        "refused": refused_exercises(),
    }
