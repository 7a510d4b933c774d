"""Drafts over JSON for the exercise page's script, and code kept across an ended session.

`GET/PUT /drafts/{place}/{exercise_id}` (`place`: a course id, or `practice`) read and replace
the signed-in learner's draft; a PUT carries the page's CSRF token in `X-CSRF-Token`. Errors
answer JSON `{"detail": ...}` like the API's.

A submission whose session had ended (its form's CSRF token is no longer this browser's, but
its Origin says it came from this site) is not refused and lost: its code is kept, the browser
gets a cookie for it and is sent to sign in, then back to the exercise, which opens on it.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Body, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.courses.courses import assignment_of, require_member
from app.db import SessionDep
from app.errors import AppError
from app.grading.drafts import (
    KEPT_SUBMISSION_SECONDS,
    discard_kept_submission,
    find_draft,
    find_kept_submission,
    keep_submission,
    save_draft,
)
from app.grading.submissions import SubmissionRejected
from app.models import Draft, KeptSubmission, User
from app.settings import Settings, SettingsDep
from app.web.sessions import (
    SESSION_COOKIE,
    CsrfHeaderViewerDep,
    CsrfRejected,
    Viewer,
    ViewerDep,
    cookie_is_secure,
    csrf_is_valid,
    get_secret_key,
    same_origin,
    sign,
    unsign,
)
from graders.exercises import UnknownExercise, get_exercise

router = APIRouter(prefix="/drafts", include_in_schema=False)
PRACTICE = "practice"
KEPT_COOKIE = "loopgrade_kept"


class DraftSignInRequired(AppError):
    status_code = 401
    title = "Sign in"


class DraftNotFound(AppError):
    status_code = 404
    title = "Not found"


class DraftRejected(AppError):
    """A draft that could not be saved: too large, or not text."""

    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.title = "Not saved"


class DraftBody(BaseModel):
    code: str


class DraftOut(BaseModel):
    code: str
    updated_at: str


def draft_url(course_id: str | None, exercise_id: str) -> str:
    return f"/drafts/{course_id or PRACTICE}/{exercise_id}"


def _draft_owner(
    session: Session, viewer: Viewer, place: str, exercise_id: str
) -> tuple[User, str | None]:
    """Whose draft, and the course id of `place` (None for practice), checked: the viewer is
    signed in, in the course, and the course (or practice) has the exercise."""
    if viewer.user is None:
        raise DraftSignInRequired(
            "Sign in to keep your draft on the server; until then this browser keeps it."
        )
    if place == PRACTICE:
        try:
            get_exercise(exercise_id)
        except UnknownExercise:
            raise DraftNotFound(f"There is no exercise called “{exercise_id[:100]}”.") from None
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
        raise DraftNotFound("You have no draft of this exercise yet.")
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
        raise DraftRejected(
            f"The draft was not saved: {exc}. This browser still keeps it.",
            status_code=exc.status_code,
        ) from None
    return _out(draft)


def keep_if_session_ended(
    request: Request,
    session: Session,
    settings: Settings,
    viewer: Viewer,
    *,
    csrf_token: str,
    code: str,
) -> Response | None:
    """None when the submission's form is this browser's (CSRF token good, go on); else, when
    it came from this site with code, keep the code and answer a redirect to sign in (or,
    never signed in, back to the page). Anything else is refused as usual (CsrfRejected)."""
    if csrf_is_valid(request, viewer, csrf_token):
        return None
    # Only a browser that says the form is this site's (every current one sends Origin on a
    # POST): code kept from elsewhere would be offered to this browser's learner to submit.
    if request.headers.get("origin") is None or not same_origin(request) or not code.strip():
        raise CsrfRejected()
    page_path = request.url.path
    try:
        token = keep_submission(
            session,
            page_path=page_path,
            code=code.replace("\r\n", "\n"),
            max_code_bytes=settings.max_code_bytes,
        )
    except SubmissionRejected:
        raise CsrfRejected() from None
    if request.cookies.get(SESSION_COOKIE) or viewer.user is not None:
        target = f"/sign-in?ended=1&next={quote(page_path, safe='')}"
    else:
        target = page_path
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        KEPT_COOKIE,
        sign(get_secret_key(request), "kept-submission", token),
        max_age=KEPT_SUBMISSION_SECONDS,
        httponly=True,
        # Lax: the redirect chain back from signing in is a top-level navigation.
        samesite="lax",
        secure=cookie_is_secure(request, settings),
    )
    return response


def kept_submission_of(request: Request, session: Session) -> KeptSubmission | None:
    """The code this browser sent to this page while its session had ended, if any."""
    token = unsign(get_secret_key(request), "kept-submission", request.cookies.get(KEPT_COOKIE))
    if token is None:
        return None
    return find_kept_submission(session, token=token, page_path=request.url.path)


def forget_kept_submission(request: Request, session: Session, response: Response) -> None:
    """The kept code was submitted: drop it and its cookie."""
    token = unsign(get_secret_key(request), "kept-submission", request.cookies.get(KEPT_COOKIE))
    if token is None:
        return
    discard_kept_submission(session, token=token)
    response.delete_cookie(KEPT_COOKIE, httponly=True, samesite="lax")
