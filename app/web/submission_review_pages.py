"""A course's submissions as an instructor reviews them: the list, a score's override and its
removal, one submission's regrade.

A learner of the course gets 403 on every one of them; anyone not in the course, 404.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.access import CsrfViewerDep, SignedInUserFormDep, ViewerDep
from app.courses.diagnosis_reports import reported_submission_ids
from app.courses.membership import (
    assignments_of,
)
from app.courses.overrides import (
    OverrideRejected,
    check_override,
    counted_change,
    remove_override,
    set_override,
)
from app.db import SessionDep
from app.grading.regrades import (
    RegradeRejected,
    request_regrade,
)
from app.models import (
    RegradeReason,
)
from app.permissions import InstructorCourseDep, ReviewableSubmissionFormDep
from app.rendering import render
from app.web.review import (
    MAX_LISTED_SUBMISSIONS,
    SubmissionFilter,
    diagnosis_counts,
    filtered_submissions,
)
from app.web.submission_view import submission_context, submission_refused
from graders.exercises import list_exercises

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


@router.get("/courses/{course_id}/submissions")
def course_submissions_page(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
    exercise: str = "",
    diagnosis: str = "",
    learner: str = "",
    reported: str = "",
) -> HTMLResponse:
    """Every submission in the course, newest first, filtered by exercise, diagnosis, learner,
    and to those whose diagnosis the learner reported as wrong."""
    chosen = SubmissionFilter(
        exercise=exercise, diagnosis=diagnosis, learner=learner, reported="1" if reported else ""
    )
    return render(
        request,
        viewer,
        "course_submissions.html",
        {
            "course": course,
            "rows": filtered_submissions(session, course.id, chosen),
            "max_rows": MAX_LISTED_SUBMISSIONS,
            "exercises": assignments_of(session, course.id),
            "titles": {e.id: e.title for e in list_exercises()},
            "diagnoses": diagnosis_counts(session, course.id, exercise),
            "reported_ids": reported_submission_ids(session, course.id),
            "chosen": chosen,
            "list_query": chosen.query_string(),
            "everyone_query": replace(chosen, learner="").query_string(),
        },
    )


def _done(submission_id: str, done: str, list_query: str) -> Response:
    """Back to the submission, saying what was done (and still in the list it was opened from)."""
    query = urlencode({"done": done, **({"list": list_query} if list_query else {})})
    return RedirectResponse(f"/submissions/{submission_id}?{query}", status_code=303)


# Each review form sends back the list the submission was opened from (see review_position).
ListQueryForm = Annotated[str, Form(alias="list")]


@router.post("/submissions/{submission_id}/override", response_model=None)
def override_form(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    submission: ReviewableSubmissionFormDep,
    score: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
    confirmed: Annotated[str, Form()] = "",
    list_query: ListQueryForm = "",
) -> Response:
    """First says what the override does to the counted score; saves it once confirmed."""
    try:
        value = float(score)
        if confirmed != "yes":
            check_override(submission, score=value, reason=reason)
            change = counted_change(session, submission, value)
            context = submission_context(request, session, viewer, submission_id)
            preview = {
                "score": f"{value:g}",
                "reason": reason,
                "change": change,
                "list_query": list_query,
            }
            return render(request, viewer, "submission.html", {**context, "preview": preview})
        set_override(session, submission, score=value, reason=reason, by=user)
    except ValueError as exc:
        message = str(exc) if isinstance(exc, OverrideRejected) else f"{score!r} is not a number"
        return submission_refused(
            request, session, viewer, submission_id, f"The override was not set: {message}."
        )
    return _done(submission_id, "override-set", list_query)


@router.post("/submissions/{submission_id}/override/remove", response_model=None)
def remove_override_form(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    submission: ReviewableSubmissionFormDep,
    confirmed: Annotated[str, Form()] = "",
    list_query: ListQueryForm = "",
) -> Response:
    """First says what removing the override does to the counted score, as setting one does;
    removes it once confirmed."""
    try:
        if confirmed != "yes":
            if submission.override_score is None:
                raise OverrideRejected("this submission has no override to remove")
            context = submission_context(request, session, viewer, submission_id)
            preview = {
                "removing": True,
                "score": f"{submission.override_score:g}",
                "change": counted_change(session, submission, None),
                "list_query": list_query,
            }
            return render(request, viewer, "submission.html", {**context, "preview": preview})
        remove_override(session, submission, by=user)
    except OverrideRejected as exc:
        return submission_refused(
            request, session, viewer, submission_id, f"Nothing removed: {exc}."
        )
    return _done(submission_id, "override-removed", list_query)


@router.post("/submissions/{submission_id}/regrade", response_model=None)
def regrade_submission_form(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    submission: ReviewableSubmissionFormDep,
    reason: Annotated[str, Form()] = "",
    note: Annotated[str, Form()] = "",
    list_query: ListQueryForm = "",
) -> Response:
    try:
        why = RegradeReason(reason)
    except ValueError:
        message = "Not regraded: say why you regrade; the learner is told if the result changes."
        return submission_refused(request, session, viewer, submission_id, message)
    try:
        request_regrade(session, submission, by=user, reason=why, note=note)
    except RegradeRejected as exc:
        return submission_refused(request, session, viewer, submission_id, f"Not regraded: {exc}.")
    return _done(submission_id, "regrade", list_query)
