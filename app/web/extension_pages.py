"""Limits and extensions, for a course's instructors: each exercise's attempt limit and timed
attempt, and one learner's own terms (a later due date, more attempts, more minutes), said
before they are saved (app/courses/extensions.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import CsrfViewerDep, SignedInUserFormDep, Viewer, ViewerDep
from app.courses.extensions import (
    MAX_ATTEMPTS,
    MAX_MINUTES,
    LimitRejected,
    accommodation_due,
    check_count,
    extension_change,
    set_extension,
    set_limits,
)
from app.courses.membership import (
    CourseError,
    assignments_of,
    extensions_of,
    members,
)
from app.db import SessionDep
from app.errors import as_sentence
from app.models import Course, CourseRole, User
from app.permissions import InstructorCourseDep, InstructorCourseFormDep
from app.rendering import PageError, render
from app.web.course_settings import parse_due

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

DONE = {
    "limits": "Limits saved.",
    "limits-unchanged": "Nothing had changed: nothing was saved.",
    "extension": "Extension saved.",
    "extension-unchanged": "Nothing had changed: nothing was saved.",
    "accommodations": "The accommodation list was saved.",
}


def _count(value: str, what: str) -> int | None:
    """A whole number typed in a form (blank: None)."""
    value = value.strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise LimitRejected(f"{what} {value[:20]!r} is not a whole number") from None


def _page(
    request: Request,
    session: Session,
    viewer: Viewer,
    course: Course,
    status_code: int = 200,
    **extra: Any,
) -> HTMLResponse:
    learners = members(session, course.id, CourseRole.LEARNER)
    names = {u.id: u for u in learners}
    extensions = sorted(
        (e for e in extensions_of(session, course.id).values() if e.user_id in names),
        key=lambda e: (names[e.user_id].name.casefold(), e.exercise_id),
    )
    exercises = assignments_of(session, course.id)
    context = {
        "course": course,
        "exercises": exercises,
        "titles": {a.id: a.exercise.title for a in exercises},
        "learners": learners,
        "names": names,
        "extensions": extensions,
        **extra,
    }
    return render(request, viewer, "extensions.html", context, status_code=status_code)


@router.get("/courses/{course_id}/extensions")
def extensions_page(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
    learner: str = "",
    exercise: str = "",
    done: str = "",
) -> HTMLResponse:
    """The exercises' limits, the learners' extensions, and the form to give one (filled in
    for `learner` and `exercise` when given: the gradebook's link)."""
    current = extensions_of(session, course.id, learner or None).get((learner, exercise))
    form = {
        "learner": learner,
        "exercise": exercise,
        "due_at": current.due_at.strftime("%Y-%m-%dT%H:%M") if current and current.due_at else "",
        "due_at_utc": current.due_at.isoformat() if current and current.due_at else "",
        "extra_attempts": str(current.extra_attempts) if current else "0",
        "extra_minutes": str(current.extra_minutes) if current else "0",
    }
    return _page(request, session, viewer, course, notice=DONE.get(done), form=form)


@router.post("/courses/{course_id}/limits", response_model=None)
def limits_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    exercise: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    max_attempts: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    time_limit_minutes: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
) -> Response:
    """Every exercise's attempt limit and time limit, saved together (or none, on an error)."""
    if not exercise or not len(exercise) == len(max_attempts) == len(time_limit_minutes):
        raise PageError(422, "Not accepted", "The limits form was incomplete: reload the page.")
    assigned = {a.id: a for a in assignments_of(session, course.id)}
    sent = []
    try:
        # All read and checked before any is set: an error saves none.
        for exercise_id, attempts, minutes in zip(
            exercise, max_attempts, time_limit_minutes, strict=True
        ):
            if exercise_id not in assigned:
                raise LimitRejected(f"the course does not set the exercise {exercise_id[:100]!r}")
            title = assigned[exercise_id].exercise.title
            try:
                limits = (
                    check_count(
                        _count(attempts, "the attempt limit"),
                        what="the attempt limit",
                        least=1,
                        most=MAX_ATTEMPTS,
                    ),
                    check_count(
                        _count(minutes, "the time limit"),
                        what="the time limit in minutes",
                        least=1,
                        most=MAX_MINUTES,
                    ),
                )
            except LimitRejected as exc:
                raise LimitRejected(f"{title}: {exc}") from None
            sent.append((assigned[exercise_id], limits))
    except LimitRejected as exc:
        return _page(
            request,
            session,
            viewer,
            course,
            status_code=exc.status_code,
            limits_error=f"Nothing was saved. {as_sentence(str(exc))}",
            form={},
        )
    changed = False
    for one, (attempts_limit, minutes_limit) in sent:
        changes = set_limits(
            session, one, max_attempts=attempts_limit, time_limit_minutes=minutes_limit, by=user
        )
        changed = changed or bool(changes)
    done = "limits" if changed else "limits-unchanged"
    return RedirectResponse(f"/courses/{course.id}/extensions?done={done}", status_code=303)


@router.post("/courses/{course_id}/extensions", response_model=None)
def extension_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    learner: Annotated[str, Form()] = "",
    exercise: Annotated[str, Form()] = "",
    due_at: Annotated[str, Form()] = "",
    extra_attempts: Annotated[str, Form()] = "",
    extra_minutes: Annotated[str, Form()] = "",
    timezone: Annotated[str, Form()] = "",
    confirmed: Annotated[str, Form()] = "",
) -> Response:
    """First says what the learner's new terms change (their counted score too); saves them
    once confirmed."""
    form = {
        "learner": learner,
        "exercise": exercise,
        "due_at": due_at.strip(),
        "due_at_utc": "",
        "extra_attempts": extra_attempts.strip(),
        "extra_minutes": extra_minutes.strip(),
    }
    try:
        learner_user = _learner(session, course, learner)
        if exercise not in {a.id for a in assignments_of(session, course.id)}:
            raise LimitRejected("choose one of the course's exercises")
        due: datetime | None = parse_due(due_at, timezone)
        attempts = _count(extra_attempts, "extra attempts") or 0
        minutes = _count(extra_minutes, "extra minutes") or 0
        check_count(attempts, what="extra attempts", least=0, most=MAX_ATTEMPTS)
        check_count(minutes, what="extra minutes", least=0, most=MAX_MINUTES)
        if confirmed != "yes":
            change = extension_change(
                session,
                course_id=course.id,
                exercise_id=exercise,
                learner=learner_user,
                due_at=due,
                extra_attempts=attempts,
                extra_minutes=minutes,
            )
            if not change.changes:
                return RedirectResponse(
                    f"/courses/{course.id}/extensions?done=extension-unchanged", status_code=303
                )
            preview = {"learner": learner_user, "change": change, "due_utc": due}
            return _page(request, session, viewer, course, form=form, preview=preview)
        change = set_extension(
            session,
            course_id=course.id,
            exercise_id=exercise,
            learner=learner_user,
            due_at=due,
            extra_attempts=attempts,
            extra_minutes=minutes,
            by=user,
        )
    except (LimitRejected, CourseError) as exc:
        return _page(
            request,
            session,
            viewer,
            course,
            status_code=422,
            extension_error=f"Not saved. {as_sentence(str(exc))}",
            form=form,
        )
    done = "extension" if change.changes else "extension-unchanged"
    return RedirectResponse(f"/courses/{course.id}/extensions?done={done}", status_code=303)


@router.post("/courses/{course_id}/extensions/many", response_model=None)
def accommodation_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    learners: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    exercises: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    days_later: Annotated[str, Form()] = "",
    extra_attempts: Annotated[str, Form()] = "",
    extra_minutes: Annotated[str, Form()] = "",
    confirmed: Annotated[str, Form()] = "",
) -> Response:
    """An accommodation list: the same terms for many learners on many exercises (each due
    date `days_later` than the course's), said for every pair first, saved once confirmed."""
    form = {
        "learners": learners,
        "exercises": exercises,
        "days_later": days_later.strip(),
        "extra_attempts": extra_attempts.strip(),
        "extra_minutes": extra_minutes.strip(),
    }
    try:
        if not learners or not exercises:
            raise LimitRejected("choose at least one learner and one exercise")
        chosen = [_learner(session, course, one) for one in dict.fromkeys(learners)]
        assigned = {a.id: a for a in assignments_of(session, course.id)}
        if any(one not in assigned for one in exercises):
            raise LimitRejected("choose the course's exercises")
        days = _count(days_later, "days later") or 0
        attempts = _count(extra_attempts, "extra attempts") or 0
        minutes = _count(extra_minutes, "extra minutes") or 0
        check_count(attempts, what="extra attempts", least=0, most=MAX_ATTEMPTS)
        check_count(minutes, what="extra minutes", least=0, most=MAX_MINUTES)
        pairs = [
            (who, assigned[one], accommodation_due(assigned[one], days))
            for who in chosen
            for one in dict.fromkeys(exercises)
        ]
        terms = {"extra_attempts": attempts, "extra_minutes": minutes}
        if confirmed != "yes":
            rows = [
                (
                    who,
                    one,
                    extension_change(
                        session,
                        course_id=course.id,
                        exercise_id=one.id,
                        learner=who,
                        due_at=due,
                        **terms,
                    ),
                )
                for who, one, due in pairs
            ]
            counts = (len(chosen), len(dict.fromkeys(exercises)))
            return _page(
                request,
                session,
                viewer,
                course,
                many_form=form,
                many_preview=rows,
                many_counts=counts,
                form={},
            )
        for who, one, due in pairs:
            set_extension(
                session,
                course_id=course.id,
                exercise_id=one.id,
                learner=who,
                due_at=due,
                by=user,
                **terms,
            )
    except (LimitRejected, CourseError) as exc:
        return _page(
            request,
            session,
            viewer,
            course,
            status_code=422,
            many_error=f"Nothing was saved. {as_sentence(str(exc))}",
            many_form=form,
            form={},
        )
    return RedirectResponse(f"/courses/{course.id}/extensions?done=accommodations", status_code=303)


def _learner(session: Session, course: Course, user_id: str) -> User:
    for member in members(session, course.id, CourseRole.LEARNER):
        if member.id == user_id:
            return member
    raise LimitRejected("choose one of the course's learners")
