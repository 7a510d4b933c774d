"""A course's settings: the exercises it assigns, when each is due and how late work counts,
and its hints.

A learner of the course gets 403 on every one of them; anyone not in the course, 404.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import CsrfViewerDep, SignedInUserFormDep, ViewerDep
from app.audit import AuditAction, record_event
from app.courses.gradebook import (
    counted_scores_changed,
)
from app.courses.hints import (
    HintSettingsRefused,
    parse_rules,
    rules_of,
    save_rules,
)
from app.courses.membership import (
    CourseError,
    add_instructor,
    assignments_of,
    check_late_penalty,
    new_course_join_code,
    set_assignment,
)
from app.db import SessionDep
from app.errors import as_sentence
from app.models import (
    Assignment,
    Course,
    LatePolicy,
    ScoringPolicy,
    User,
)
from app.people.accounts import find_user_by_email
from app.permissions import InstructorCourseDep, InstructorCourseFormDep
from app.rendering import PageError, render
from app.web.course_settings import AssignmentFields, parse_due, settings_context
from graders.exercise import Exercise
from graders.exercises import list_exercises

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


SETTINGS_DONE = {
    "created": "Course created, with every exercise set (no due dates yet). "
    "Give your learners the join code below.",
    "saved": "Settings saved.",
    "unchanged": "Nothing had changed: nothing was saved.",
    "staff": "The course's staff is changed.",
    "list": "The exercise list's order and units are saved.",
}


@router.get("/courses/{course_id}/settings")
def settings_page(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
    done: str = "",
    changed: str = "",
) -> HTMLResponse:
    titles = {e.id: e.title for e in list_exercises()}
    changes = [titles.get(part, part) for part in changed.split(",") if part in titles]
    notice = SETTINGS_DONE.get(done)
    if notice and changes:
        notice = f"{notice} Changed: {', '.join(changes)}."
    context = {**settings_context(session, course), "notice": notice}
    return render(request, viewer, "settings.html", context)


def _sent_fields(
    exercise: Exercise,
    *,
    assigned: bool,
    due_at: str,
    late_policy: str,
    late_penalty_percent_per_day: str,
    scoring_policy: str,
    show_solution: bool,
    timezone: str,
) -> tuple[AssignmentFields, dict[str, Any] | None]:
    """One fieldset as sent, and the values to save (None when it has an error)."""
    fields = AssignmentFields(
        exercise,
        assigned,
        due_at.strip(),
        "",
        late_policy,
        late_penalty_percent_per_day.strip(),
        scoring_policy,
        show_solution,
    )
    try:
        try:
            penalty = float(late_penalty_percent_per_day or 0)
        except ValueError:
            raise CourseError(
                f"the late penalty {late_penalty_percent_per_day.strip()!r} is not a number"
            ) from None
        check_late_penalty(penalty)
        try:
            late, scoring = LatePolicy(late_policy), ScoringPolicy(scoring_policy)
        except ValueError:
            raise CourseError("choose what happens after the due date, and what counts") from None
        values = {
            "assigned": assigned,
            "due_at": parse_due(due_at, timezone),
            "late_policy": late,
            "late_penalty_percent_per_day": penalty,
            "scoring_policy": scoring,
            "show_solution_after_due": show_solution,
        }
    except CourseError as exc:
        return replace(fields, error=as_sentence(str(exc))), None
    return fields, values


def _assignment_state(row: Assignment | None) -> tuple[object, ...] | None:
    if row is None:
        return None
    return (
        row.due_at,
        row.late_policy,
        row.late_penalty_percent_per_day,
        row.scoring_policy,
        row.show_solution_after_due,
    )


@router.post("/courses/{course_id}/settings", response_model=None)
def settings_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    exercise: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    due_at: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    late_policy: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    late_penalty_percent_per_day: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    scoring_policy: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    assigned: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    # The exercises whose reference is shown after the due date (a ticked box each).
    show_solution: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    timezone: Annotated[str, Form()] = "",
    instructor_email: Annotated[str, Form()] = "",
    new_join_code: Annotated[str, Form()] = "",
    confirmed: Annotated[str, Form()] = "",
    hint_unlock_attempts: Annotated[str | None, Form()] = None,
    hints_hide_fix: Annotated[str, Form()] = "",
    lesson_url: Annotated[str, Form()] = "",
) -> Response:
    """The whole settings page is one form: every exercise's fields are saved together (or,
    when one has an error, none is, and the page comes back with everything as it was sent)."""
    columns = (exercise, due_at, late_policy, late_penalty_percent_per_day, scoring_policy)
    sent = _sent_assignments(
        columns, assigned=assigned, show_solution=show_solution, timezone=timezone
    )
    fields = [f for f, _ in sent]
    errors = [f"{f.exercise.title}: {f.error}" for f in fields if f.error]
    # A form without the hints fieldset (an older page) leaves the hint settings as they are.
    hint_rules, hint_fields = rules_of(course), None
    if hint_unlock_attempts is not None:
        hint_fields = {
            "unlock_attempts": hint_unlock_attempts,
            "hide_fix": bool(hints_hide_fix),
            "lesson_url": lesson_url,
            "error": "",
        }
        try:
            hint_rules = parse_rules(
                unlock_attempts=hint_unlock_attempts,
                hide_fix=bool(hints_hide_fix),
                lesson_url=lesson_url,
            )
        except HintSettingsRefused as exc:
            hint_fields["error"] = as_sentence(str(exc))
            errors.append(f"Hints: {as_sentence(str(exc))}")
    other = find_user_by_email(session, instructor_email) if instructor_email.strip() else None
    if instructor_email.strip() and other is None:
        errors.append(
            f"No account has the email {instructor_email.strip()!r}: they need to sign up "
            "before you can add them as an instructor."
        )
    if errors:
        context = {
            **settings_context(session, course, fields, hint_fields),
            "error": "Nothing was saved. " + " ".join(errors),
            "instructor_email": instructor_email,
            "new_join_code": bool(new_join_code),
        }
        return render(request, viewer, "settings.html", context, status_code=422)

    counted_changes = _counted_changes(session, course, sent)
    summary = ",".join(f"{exercise_id}:{n}" for exercise_id, _, n in counted_changes)
    if counted_changes and confirmed != summary:
        # Said before saving; a form changed since it was said is said again.
        context = {
            **settings_context(session, course, fields, hint_fields),
            "counted_changes": counted_changes,
            "confirm_summary": summary,
            "instructor_email": instructor_email,
            "new_join_code": bool(new_join_code),
        }
        return render(request, viewer, "settings.html", context)
    changes_by_exercise = {exercise_id: n for exercise_id, _, n in counted_changes}
    changed = _save_assignments(session, user, course, sent, changes_by_exercise)
    hints_changed = save_rules(session, course, hint_rules, by=user)
    if other is not None:
        add_instructor(session, course=course, user=other)
        record_event(
            session,
            actor=user,
            action=AuditAction.COURSE_INSTRUCTOR_ADDED,
            course_id=course.id,
            email=other.email,
        )
    if new_join_code:
        new_course_join_code(session, course)
        record_event(session, actor=user, action=AuditAction.COURSE_JOIN_CODE, course_id=course.id)
    done = (
        "saved" if changed or hints_changed or other is not None or new_join_code else "unchanged"
    )
    query = urlencode({"done": done, **({"changed": ",".join(changed)} if changed else {})})
    return RedirectResponse(f"/courses/{course.id}/settings?{query}", status_code=303)


def _sent_assignments(
    columns: tuple[list[str], ...],
    *,
    assigned: list[str],
    show_solution: list[str],
    timezone: str,
) -> list[tuple[AssignmentFields, dict[str, Any] | None]]:
    """Each exercise's row of the form, read: its fields as sent, and its values (None when
    one has an error)."""
    if not columns[0] or len({len(column) for column in columns}) != 1:
        raise PageError(422, "Not accepted", "The settings form was incomplete: reload the page.")
    known = {e.id: e for e in list_exercises()}
    sent = []
    for exercise_id, due, late, penalty, scoring in zip(*columns, strict=True):
        if exercise_id not in known:
            raise PageError(422, "Not accepted", f"There is no exercise called “{exercise_id}”.")
        sent.append(
            _sent_fields(
                known[exercise_id],
                assigned=exercise_id in assigned,
                due_at=due,
                late_policy=late,
                late_penalty_percent_per_day=penalty,
                scoring_policy=scoring,
                show_solution=exercise_id in show_solution,
                timezone=timezone,
            )
        )
    return sent


def _counted_changes(
    session: Session, course: Course, sent: list[tuple[AssignmentFields, dict[str, Any] | None]]
) -> list[tuple[str, str, int]]:
    """(exercise id, title, learners whose counted score changes) for each exercise still set
    whose new policy changes any."""
    changes = []
    for fields_sent, values in sent:
        if values is None or not values["assigned"]:
            continue
        policy = {key: value for key, value in values.items() if key != "assigned"}
        exercise = fields_sent.exercise
        count = counted_scores_changed(
            session, course, exercise, Assignment(exercise_id=exercise.id, **policy)
        )
        if count:
            changes.append((exercise.id, exercise.title, count))
    return changes


def _save_assignments(
    session: Session,
    user: User,
    course: Course,
    sent: list[tuple[AssignmentFields, dict[str, Any] | None]],
    counted_changes: dict[str, int],
) -> list[str]:
    """Store every exercise's settings; audit and return the ids of those that changed."""
    before = {a.id: _assignment_state(a.assignment) for a in assignments_of(session, course.id)}
    changed = []
    for fields_sent, values in sent:
        assert values is not None
        exercise_id = fields_sent.exercise.id
        row = set_assignment(session, course_id=course.id, exercise_id=exercise_id, **values)
        if _assignment_state(row) == before.get(exercise_id):
            continue
        changed.append(exercise_id)
        record_event(
            session,
            actor=user,
            action=AuditAction.ASSIGNMENT_SET if row else AuditAction.ASSIGNMENT_REMOVED,
            course_id=course.id,
            exercise=exercise_id,
            due_at=row.due_at.isoformat() if row and row.due_at else None,
            late_policy=row.late_policy if row else None,
            late_penalty_percent_per_day=row.late_penalty_percent_per_day if row else None,
            scoring_policy=row.scoring_policy if row else None,
            show_solution_after_due=row.show_solution_after_due if row else None,
            counted_scores_changed=counted_changes.get(exercise_id, 0),
        )
    return changed
