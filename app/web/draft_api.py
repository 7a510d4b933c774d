"""Drafts over JSON, for the exercise page's script.

`GET/PUT /drafts/{place}/{exercise_id}` (`place`: a course id, or `practice`) read and replace
the signed-in learner's draft; a PUT carries the page's CSRF token in `X-CSRF-Token`. Errors
answer JSON `{"detail": ...}` like the API's.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.access import (
    CsrfHeaderViewerDep,
    Viewer,
    ViewerDep,
)
from app.courses.membership import assignment_of, require_member
from app.db import SessionDep
from app.grading.drafts import (
    find_draft,
    save_draft,
)
from app.grading.submissions import SubmissionRejected
from app.models import Draft, User
from app.rendering import PageError
from app.settings import SettingsDep
from graders.exercises import UnknownExercise, get_exercise

router = APIRouter(prefix="/drafts", include_in_schema=False)
PRACTICE = "practice"


class DraftBody(BaseModel):
    code: str


class DraftOut(BaseModel):
    code: str
    updated_at: str


def _draft_owner(
    session: Session, viewer: Viewer, place: str, exercise_id: str
) -> tuple[User, str | None]:
    """Whose draft, and the course id of `place` (None for practice), checked: the viewer is
    signed in, in the course, and the course (or practice) has the exercise."""
    if viewer.user is None:
        raise PageError(
            401,
            "Sign in",
            "Sign in to keep your draft on the server; until then this browser keeps it.",
        )
    if place == PRACTICE:
        try:
            get_exercise(exercise_id)
        except UnknownExercise:
            raise PageError(
                404, "Not found", f"There is no exercise called “{exercise_id[:100]}”."
            ) from None
        return viewer.user, None
    course, _ = require_member(session, viewer.user, place)
    assignment_of(session, course.id, exercise_id)
    return viewer.user, course.id


def _out(draft: Draft) -> DraftOut:
    return DraftOut(code=draft.code, updated_at=draft.updated_at.isoformat())


@router.get("/{place}/{exercise_id}")
def get_draft(place: str, exercise_id: str, session: SessionDep, viewer: ViewerDep) -> DraftOut:
    """The signed-in learner's draft of this exercise."""
    user, course_id = _draft_owner(session, viewer, place, exercise_id)
    draft = find_draft(session, user_id=user.id, course_id=course_id, exercise_id=exercise_id)
    if draft is None:
        raise PageError(404, "Not found", "You have no draft of this exercise yet.")
    return _out(draft)


@router.put("/{place}/{exercise_id}")
def put_draft(
    place: str,
    exercise_id: str,
    body: Annotated[DraftBody, Body()],
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfHeaderViewerDep,
) -> DraftOut:
    """Replace the signed-in learner's draft of this exercise."""
    user, course_id = _draft_owner(session, viewer, place, exercise_id)
    try:
        draft = save_draft(
            session,
            user_id=user.id,
            course_id=course_id,
            exercise_id=exercise_id,
            code=body.code,
            max_code_bytes=settings.max_code_bytes,
        )
    except SubmissionRejected as exc:
        raise PageError(
            exc.status_code,
            "Not saved",
            f"The draft was not saved: {exc}. This browser still keeps it.",
        ) from None
    return _out(draft)
