"""One submission as a page shows it: who may see it, its result, and its review."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from markupsafe import Markup
from sqlalchemy.orm import Session

from app.courses.diagnosis_reports import report_of
from app.courses.gradebook import standing_of
from app.courses.hints import hint_view
from app.courses.membership import can_view_submission, course_role
from app.courses.practice import courses_setting
from app.grading.regrades import changed_by_regrade
from app.grading.results import failure_said, shown_result
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


def result_context(session: Session, submission: Submission) -> dict[str, Any]:
    shown = shown_result(submission)
    standing, counted_words = standing_of(session, submission)
    # A practice result offers its learner's courses that set the exercise, to take it there.
    in_courses = (
        courses_setting(session, submission.user_id).get(submission.exercise_id, [])
        if submission.course_id is None and submission.status == SubmissionStatus.GRADED
        else []
    )
    runs = next((check for check in shown.checks if check.id == "runs"), None)
    return {
        "submission": submission,
        "finished": submission.status in FINISHED,
        "result": shown,
        # What it counts and why, when not as graded: late, locked or overridden.
        "standing": standing,
        "counted_words": counted_words,
        # The line a syntax error or an exception names, marked in the code shown.
        "error_line": failure_line(failure_said(submission), submission.code)
        if runs is not None and not runs.passed
        else None,
        # line_chart escapes every text it puts in the SVG.
        "charts": [Markup(line_chart(plot)) for plot in shown.plots],
        "in_courses": in_courses,
    }


def _is_owner(request: Request, viewer: Viewer, submission: Submission) -> bool:
    if viewer.user is not None:
        return submission.user_id == viewer.user.id
    return submission.user_id is None and submission.learner == anonymous_learner(request, viewer)


def _exercise_page(submission: Submission) -> str:
    course = f"/courses/{submission.course_id}" if submission.course_id else ""
    return f"{course}/exercises/{submission.exercise_id}"


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
        "hints": hint_view(session, submission, course, _exercise_page(submission))
        if is_owner and viewer.user is not None
        else None,
        # Where hints.js puts the hints once a result still grading is in.
        "hints_pending": is_owner and viewer.user is not None and submission.status not in FINISHED,
        **result_context(session, submission),
    }


def submission_refused(
    request: Request, session: Session, viewer: Viewer, submission_id: str, message: str
) -> Response:
    """The submission's page again, saying why what was sent from it was refused."""
    context = submission_context(request, session, viewer, submission_id)
    return render(
        request, viewer, "submission.html", {**context, "error": message}, status_code=422
    )
