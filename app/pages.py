"""HTML pages for learners: the exercises, a code form, and the result as soon as it is graded.

The pages embed in an LMS iframe, so no X-Frame-Options; scripts and styles are our own files
(no CDN, no inline script), which lets the Content-Security-Policy forbid everything else.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Cookie, Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from markdown_it import MarkdownIt
from markupsafe import Markup

from app.charts import line_chart
from app.db import SessionDep
from app.models import Submission, SubmissionStatus
from app.queue import DispatcherDep
from app.settings import SettingsDep
from app.submissions import CodeTooLarge, SubmissionRejected, create_submission, get_submission
from graders.exercises import Exercise, UnknownExercise, get_exercise, list_exercises
from graders.report import PlotSeries

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

templates = Jinja2Templates(directory=Path(__file__).resolve().parent / "templates")
# Raw HTML in markdown is shown as text: feedback can quote the learner's own code and errors.
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
templates.env.filters["markdown"] = lambda text: Markup(_markdown.render(text or ""))

LEARNER_COOKIE = "loopgrade_learner"
_LEARNER_COOKIE_VALUE = re.compile(r"web:[A-Za-z0-9_-]{16,64}")
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors *"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
FINISHED = {SubmissionStatus.GRADED, SubmissionStatus.ERROR}


def new_learner_id() -> str:
    """An anonymous learner, kept in a cookie until LTI brings real identities."""
    return f"web:{secrets.token_urlsafe(16)}"


def render(
    request: Request, template: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    return templates.TemplateResponse(
        request, template, context, status_code=status_code, headers=PAGE_HEADERS
    )


def not_found(request: Request, message: str) -> HTMLResponse:
    return render(request, "not_found.html", {"message": message}, status_code=404)


def result_context(submission: Submission) -> dict[str, Any]:
    return {
        "submission": submission,
        "finished": submission.status in FINISHED,
        "checks": submission.checks or [],
        # line_chart escapes every text it puts in the SVG.
        "charts": [
            Markup(line_chart(PlotSeries.model_validate(plot))) for plot in submission.plots or []
        ],
    }


@router.get("/")
def index(request: Request) -> HTMLResponse:
    return render(request, "index.html", {"exercises": list_exercises()})


@router.get("/exercises/{exercise_id}")
def exercise_page(
    request: Request, exercise_id: str, session: SessionDep, edit: str | None = None
) -> HTMLResponse:
    """The prompt and the editor: with the starter code, or a submission's code to `edit`."""
    try:
        exercise = get_exercise(exercise_id)
    except UnknownExercise:
        return not_found(request, f"There is no exercise called “{exercise_id}”.")
    code = exercise.starter_code
    previous = get_submission(session, edit) if edit else None
    if previous is not None and previous.exercise_id == exercise.id:
        code = previous.code
    return render(request, "exercise.html", {"exercise": exercise, "code": code})


@router.post("/exercises/{exercise_id}", response_model=None)
def submit_form(
    request: Request,
    exercise_id: str,
    session: SessionDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    code: Annotated[str, Form()] = "",
    learner_cookie: Annotated[str | None, Cookie(alias=LEARNER_COOKIE)] = None,
) -> Response:
    try:
        exercise = get_exercise(exercise_id)
    except UnknownExercise:
        return not_found(request, f"There is no exercise called “{exercise_id}”.")
    # Browsers send textarea lines with CRLF.
    code = code.replace("\r\n", "\n")
    learner = learner_cookie or ""
    new_learner = not _LEARNER_COOKIE_VALUE.fullmatch(learner)
    if new_learner:
        learner = new_learner_id()
    try:
        submission = create_submission(
            session,
            exercise_id=exercise.id,
            learner=learner,
            code=code,
            max_code_bytes=settings.max_code_bytes,
        )
    except SubmissionRejected as exc:
        return render(
            request,
            "exercise.html",
            {"exercise": exercise, "code": code, "error": str(exc)},
            status_code=413 if isinstance(exc, CodeTooLarge) else 422,
        )
    session.commit()
    dispatcher.enqueue(submission.id)
    response = RedirectResponse(f"/submissions/{submission.id}", status_code=303)
    if new_learner:
        # Lax: an LMS iframe may not send it, and then the learner is a new anonymous one.
        response.set_cookie(
            LEARNER_COOKIE, learner, max_age=365 * 24 * 3600, httponly=True, samesite="lax"
        )
    return response


@router.get("/submissions/{submission_id}")
def submission_page(request: Request, submission_id: str, session: SessionDep) -> HTMLResponse:
    submission = get_submission(session, submission_id)
    if submission is None:
        return not_found(request, "There is no submission with this id.")
    try:
        exercise: Exercise | None = get_exercise(submission.exercise_id)
    except UnknownExercise:
        exercise = None
    return render(request, "submission.html", {"exercise": exercise, **result_context(submission)})


@router.get("/submissions/{submission_id}/result")
def submission_result(request: Request, submission_id: str, session: SessionDep) -> HTMLResponse:
    """The result section alone, which the submission page polls until it is finished."""
    submission = get_submission(session, submission_id)
    if submission is None:
        return not_found(request, "There is no submission with this id.")
    return render(request, "_result.html", result_context(submission))
