"""A course's exercise list, ordered and grouped in units by its instructors on the settings
page, saved at once apart from the settings form (`app.courses.exercise_list`). Adding and
removing an exercise is the settings form's "Set in this course"."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.access import CsrfViewerDep, SignedInUserFormDep
from app.courses.exercise_list import save_exercise_list
from app.courses.membership import CourseError
from app.db import SessionDep
from app.errors import as_sentence
from app.permissions import InstructorCourseFormDep
from app.rendering import render
from app.web.course_settings import settings_context

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


@router.post("/courses/{course_id}/exercise-list", response_model=None)
def exercise_list_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    actor: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    exercise: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    place: Annotated[list[str], Form()] = [],  # noqa: B006
    unit: Annotated[list[str], Form()] = [],  # noqa: B006
) -> Response:
    try:
        if not len(exercise) == len(place) == len(unit):
            raise CourseError("the exercise list was incomplete: reload the page")
        places = []
        for exercise_id, sent in zip(exercise, place, strict=True):
            try:
                places.append(int(sent))
            except ValueError:
                raise CourseError(
                    f"the place of {exercise_id[:100]!r} is {sent.strip()[:20]!r}: give a whole "
                    "number, 1 for the first"
                ) from None
        # Of two given one place, the one moved there goes first; the others keep their order.
        wanted = sorted(range(len(exercise)), key=lambda i: (places[i], places[i] == i + 1))
        changed = save_exercise_list(
            session,
            course=course,
            order=[exercise[i] for i in wanted],
            units=[unit[i] for i in wanted],
            by=actor,
        )
    except CourseError as exc:
        context = {**settings_context(session, course), "list_error": as_sentence(str(exc))}
        return render(request, viewer, "settings.html", context, status_code=exc.status_code)
    query = urlencode({"done": "list" if changed else "unchanged"})
    return RedirectResponse(f"/courses/{course.id}/settings?{query}#list-heading", status_code=303)
