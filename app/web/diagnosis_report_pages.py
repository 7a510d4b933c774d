"""The learner's forms on their submission's page: "this diagnosis looks wrong", and the
next hint for its diagnosis."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from app.access import CsrfViewerDep, SignedInUserFormDep
from app.courses.diagnosis_reports import ReportRejected, report_diagnosis
from app.courses.hints import HintRefused, open_hint
from app.db import SessionDep
from app.models import Course
from app.web.submission_view import submission_refused, viewable_submission

router = APIRouter(include_in_schema=False)


@router.post("/submissions/{submission_id}/diagnosis-report", response_model=None)
def report_wrong_diagnosis(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    note: Annotated[str, Form()] = "",
) -> Response:
    submission = viewable_submission(request, session, viewer, submission_id)
    try:
        report_diagnosis(session, submission, by=user, note=note)
    except ReportRejected as exc:
        return submission_refused(request, session, viewer, submission_id, f"Not sent: {exc}.")
    return RedirectResponse(f"/submissions/{submission_id}?done=reported", status_code=303)


@router.post("/submissions/{submission_id}/hints", response_model=None)
def open_hint_form(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    level: Annotated[int, Form(ge=1, le=3)],
) -> Response:
    """Open the next hint level; back to the page at the hints (hints.js does it in place)."""
    submission = viewable_submission(request, session, viewer, submission_id)
    course = session.get(Course, submission.course_id) if submission.course_id else None
    try:
        open_hint(session, submission, course, by=user, level=level)
    except HintRefused as exc:
        return submission_refused(request, session, viewer, submission_id, f"Not opened: {exc}.")
    return RedirectResponse(f"/submissions/{submission_id}#hint-{level}", status_code=303)
