"""One submission as a page shows it: who may see it, its result, and its review."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from markupsafe import Markup
from sqlalchemy.orm import Session

from app.courses.diagnosis_reports import report_of
from app.courses.membership import can_view_submission, course_role
from app.grading.regrades import changed_by_regrade
from app.grading.results import shown_result
from app.grading.submissions import get_submission
from app.models import Course, CourseRole, Submission, SubmissionStatus
from app.web.charts import line_chart
from app.web.rendering import PageError, render
from app.web.review import review_context
from app.web.sessions import Viewer, anonymous_learner
from graders.exercises import Exercise, UnknownExercise, get_exercise
from graders.grading import failure_line

FINISHED = {SubmissionStatus.GRADED, SubmissionStatus.ERROR}


NO_SUBMISSION = "There is no submission with this id, or it is not yours to see."


def viewable_submission(
    request: Request, session: Session, viewer: Viewer, submission_id: str
) -> Submission:
    submission = get_submission(session, submission_id)
    if submission is None or not can_view_submission(
        session, viewer.user, anonymous_learner(request, viewer), submission
    ):
        raise PageError(404, "Not found", NO_SUBMISSION)
    return submission


def result_context(submission: Submission) -> dict[str, Any]:
    shown = shown_result(submission)
    runs = next((check for check in shown.checks if check.id == "runs"), None)
    return {
        "submission": submission,
        "finished": submission.status in FINISHED,
        "result": shown,
        # The line a syntax error or an exception names, marked in the code shown.
        "error_line": failure_line(runs.message, submission.code) if runs else None,
        # line_chart escapes every text it puts in the SVG.
        "charts": [Markup(line_chart(plot)) for plot in shown.plots],
    }


def _is_owner(request: Request, viewer: Viewer, submission: Submission) -> bool:
    if viewer.user is not None:
        return submission.user_id == viewer.user.id
    return submission.user_id is None and submission.learner == anonymous_learner(request, viewer)


def submission_context(
    request: Request, session: Session, viewer: Viewer, submission_id: str
) -> dict[str, Any]:
    submission = viewable_submission(request, session, viewer, submission_id)
    try:
        exercise: Exercise | None = get_exercise(submission.exercise_id)
    except UnknownExercise:
        exercise = None
    course = session.get(Course, submission.course_id) if submission.course_id else None
    is_owner = _is_owner(request, viewer, submission)
    # Whoever may see it and did not make it reviews it: an instructor or a site admin.
    review = None
    if not is_owner or (
        course is not None and course_role(session, viewer.user, course.id) == CourseRole.INSTRUCTOR
    ):
        review = review_context(session, request.app.state.settings, submission)
    return {
        "exercise": exercise,
        "course": course,
        "is_owner": is_owner,
        "review": review,
        "regrade_change": changed_by_regrade(session, [submission.id]).get(submission.id),
        "diagnosis_report": report_of(session, submission.id),
        **result_context(submission),
    }


def submission_refused(
    request: Request, session: Session, viewer: Viewer, submission_id: str, message: str
) -> Response:
    """The submission's page again, saying why what was sent from it was refused."""
    context = submission_context(request, session, viewer, submission_id)
    return render(
        request, viewer, "submission.html", {**context, "error": message}, status_code=422
    )
