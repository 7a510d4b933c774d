"""A course's staff, changed by its instructors from the settings page: an instructor made a
learner, or taken out of the course (never the last one). Adding one is part of the settings
form (`app.web.settings_pages`)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.access import CsrfViewerDep, SignedInUserFormDep
from app.audit import AuditAction, record_event
from app.courses.membership import CourseError, StaffChange, change_staff
from app.db import SessionDep
from app.errors import as_sentence
from app.models import User
from app.permissions import InstructorCourseFormDep
from app.rendering import render
from app.web.course_settings import settings_context

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


@router.post("/courses/{course_id}/staff", response_model=None)
def change_staff_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    actor: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    user_id: Annotated[str, Form()] = "",
    change: Annotated[str, Form()] = "",
) -> Response:
    member = session.get(User, user_id[:36]) if user_id else None
    try:
        if change not in set(StaffChange):
            raise CourseError("the form asked for no known change: reload the page")
        if member is None:
            raise CourseError("no such member of the course: reload the page")
        change_staff(session, course=course, user=member, change=StaffChange(change), by=actor)
    except CourseError as exc:
        # Said by the staff list, not as the settings form's error: the settings were not
        # sent, so nothing of theirs is left unsaved.
        context = {**settings_context(session, course), "staff_error": as_sentence(str(exc))}
        return render(request, viewer, "settings.html", context, status_code=exc.status_code)
    record_event(
        session,
        actor=actor,
        action=AuditAction.COURSE_STAFF_CHANGED,
        course_id=course.id,
        email=member.email,
        change=change,
    )
    if member.id == actor.id:
        # They stepped down: the settings are no longer theirs to see.
        target = "/" if change == StaffChange.REMOVE else f"/courses/{course.id}"
        return RedirectResponse(target, status_code=303)
    query = urlencode({"done": "staff"})
    return RedirectResponse(f"/courses/{course.id}/settings?{query}", status_code=303)
