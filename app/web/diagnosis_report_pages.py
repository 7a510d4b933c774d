"""The learner's "this diagnosis looks wrong" form on their submission's page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from app.courses.diagnosis_reports import ReportRejected, report_diagnosis
from app.db import SessionDep
from app.web.sessions import CsrfViewerDep, signed_in_user
from app.web.submission_view import submission_refused, viewable_submission

router = APIRouter(include_in_schema=False)


@router.post("/submissions/{submission_id}/diagnosis-report", response_model=None)
def report_wrong_diagnosis(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    note: Annotated[str, Form()] = "",
) -> Response:
    user = signed_in_user(viewer)
    submission = viewable_submission(request, session, viewer, submission_id)
    try:
        report_diagnosis(session, submission, by=user, note=note)
    except ReportRejected as exc:
        return submission_refused(request, session, viewer, submission_id, f"Not sent: {exc}.")
    return RedirectResponse(f"/submissions/{submission_id}?done=reported", status_code=303)
