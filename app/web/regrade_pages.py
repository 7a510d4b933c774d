"""Regrading an exercise of a course: the confirmation, the dry run and what it found, the
regrade's progress.

A learner of the course gets 403 on every one of them; anyone not in the course, 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import CsrfViewerDep, SignedInUserFormDep, Viewer, ViewerDep
from app.courses.membership import (
    AssignedExercise,
    NotFound,
    assignment_of,
)
from app.db import SessionDep
from app.grading.dry_runs import MAX_ROWS_SHOWN, dry_run_report, request_dry_run
from app.grading.regrades import (
    RegradeRejected,
    regrade_candidates,
    regrade_progress,
    request_exercise_regrade,
)
from app.models import (
    Course,
    RegradeReason,
)
from app.permissions import InstructorCourseDep, InstructorCourseFormDep
from app.rendering import PageError, render
from graders.exercises import list_exercises

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def _regrade_confirmation(
    request: Request,
    session: Session,
    viewer: Viewer,
    course: Course,
    assigned: AssignedExercise,
    which: str,
    *,
    notice: str = "",
    chosen_reason: str = "",
    note: str = "",
    status_code: int = 200,
) -> HTMLResponse:
    only_outdated = which != "all"
    candidates = regrade_candidates(
        session, course_id=course.id, exercise_id=assigned.id, only_outdated=only_outdated
    )
    return render(
        request,
        viewer,
        "regrade_confirm.html",
        {
            "course": course,
            "assigned": assigned,
            "which": "outdated" if only_outdated else "all",
            "count": len(candidates),
            "learners": len({s.user_id or s.learner for s in candidates}),
            "reasons": list(RegradeReason),
            "chosen_reason": chosen_reason,
            "note": note,
            "notice": notice,
        },
        status_code=status_code,
    )


@router.get("/courses/{course_id}/exercises/{exercise_id}/regrade")
def regrade_confirm_page(
    request: Request,
    exercise_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
    which: str = "outdated",
) -> HTMLResponse:
    """Before a regrade of an exercise: how many submissions it will run, and why."""
    assigned = assignment_of(session, course.id, exercise_id)
    return _regrade_confirmation(request, session, viewer, course, assigned, which)


@router.post("/courses/{course_id}/exercises/{exercise_id}/regrade", response_model=None)
def regrade_exercise_form(
    request: Request,
    exercise_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    which: Annotated[str, Form()] = "outdated",
    expected_count: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
    note: Annotated[str, Form()] = "",
) -> Response:
    assigned = assignment_of(session, course.id, exercise_id)
    count = len(
        regrade_candidates(
            session, course_id=course.id, exercise_id=assigned.id, only_outdated=which != "all"
        )
    )
    if expected_count != str(count):
        # Confirmed for another number (submissions came or were regraded since): ask again.
        return _regrade_confirmation(
            request,
            session,
            viewer,
            course,
            assigned,
            which,
            notice=f"The number of submissions changed since the page was opened "
            f"(now {count}): check it and confirm again.",
            chosen_reason=reason,
            note=note,
            status_code=409,
        )
    try:
        why = RegradeReason(reason)
    except ValueError:
        return _regrade_confirmation(
            request,
            session,
            viewer,
            course,
            assigned,
            which,
            notice="Say why you regrade: the learners whose result changes are told.",
            note=note,
            status_code=422,
        )
    try:
        batch_id, _ = request_exercise_regrade(
            session,
            course_id=course.id,
            exercise_id=assigned.id,
            only_outdated=which != "all",
            by=user,
            reason=why,
            note=note,
        )
    except RegradeRejected as exc:
        raise PageError(409, "Nothing to regrade", f"Nothing was regraded: {exc}.") from None
    return RedirectResponse(f"/courses/{course.id}/regrades/{batch_id}", status_code=303)


@router.post("/courses/{course_id}/exercises/{exercise_id}/regrade/dry-run", response_model=None)
def regrade_dry_run_form(
    exercise_id: str,
    session: SessionDep,
    user: SignedInUserFormDep,
    course: InstructorCourseFormDep,
    which: Annotated[str, Form()] = "outdated",
) -> Response:
    """Grade what the regrade would, changing nothing: the result is shown on its own page."""
    assigned = assignment_of(session, course.id, exercise_id)
    try:
        batch_id, _ = request_dry_run(
            session,
            course_id=course.id,
            exercise_id=assigned.id,
            only_outdated=which != "all",
            by=user,
        )
    except RegradeRejected as exc:
        raise PageError(409, "Nothing to regrade", f"No dry run was made: {exc}.") from None
    return RedirectResponse(
        f"/courses/{course.id}/exercises/{assigned.id}/dry-runs/{batch_id}", status_code=303
    )


@router.get("/courses/{course_id}/exercises/{exercise_id}/dry-runs/{batch_id}")
def regrade_dry_run_page(
    request: Request,
    exercise_id: str,
    batch_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
) -> HTMLResponse:
    assigned = assignment_of(session, course.id, exercise_id)
    report = dry_run_report(session, course.id, assigned, batch_id)
    if report is None:
        raise NotFound("There is no such dry run in this course.")
    template = "_dry_run_progress.html" if request.query_params.get("part") else "dry_run.html"
    return render(
        request,
        viewer,
        template,
        {"course": course, "assigned": assigned, "report": report, "max_rows": MAX_ROWS_SHOWN},
    )


@router.get("/courses/{course_id}/regrades/{batch_id}")
def regrade_page(
    request: Request,
    batch_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
) -> HTMLResponse:
    progress = regrade_progress(session, batch_id)
    if progress is None or any(s.course_id != course.id for _, s in progress.rows):
        raise NotFound("There is no such regrade in this course.")
    template = "_regrade_progress.html" if request.query_params.get("part") else "regrade.html"
    return render(
        request,
        viewer,
        template,
        {
            "course": course,
            "progress": progress,
            "titles": {e.id: e.title for e in list_exercises()},
        },
    )
