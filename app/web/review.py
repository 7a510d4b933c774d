"""What an instructor sees of one submission besides its result: who, limits, history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from markupsafe import Markup
from sqlalchemy.orm import Session

from app.courses.audit import events
from app.courses.courses import can_view_submission, course_role
from app.grading.queue import grading_limits
from app.grading.regrades import regrades_of
from app.grading.submissions import get_submission
from app.models import Course, CourseRole, Submission, SubmissionStatus, User
from app.settings import Settings
from app.web.charts import line_chart
from app.web.rendering import PageError
from app.web.sessions import Viewer, anonymous_learner
from graders.exercises import Exercise, UnknownExercise, get_exercise
from graders.grading import GRADING_LIMITS
from graders.report import PlotSeries

# Which cap a diagnosis means the sandbox stopped the code at.
LIMIT_DIAGNOSES = {
    "timeout": "time (wall-clock or CPU)",
    "memory-limit": "memory",
    "output-limit": "output",
}


@dataclass(frozen=True)
class SandboxLimit:
    name: str
    value: str
    hit: bool


def sandbox_limits(settings: Settings, submission: Submission) -> list[SandboxLimit]:
    """The caps each sandbox run had (as configured now), and which one this submission hit."""
    limits = grading_limits(settings) or GRADING_LIMITS
    hit = LIMIT_DIAGNOSES.get(submission.diagnosis or "")
    runs_message = next(
        (c.get("message", "") for c in submission.checks or [] if c.get("id") == "runs"), ""
    )
    return [
        SandboxLimit(
            "time (wall-clock or CPU)",
            f"{limits.wall_timeout_seconds:g} s wall, {limits.cpu_seconds:g} s CPU",
            hit == "time (wall-clock or CPU)",
        ),
        SandboxLimit("memory", f"{limits.memory_bytes // 2**20} MiB", hit == "memory"),
        SandboxLimit("output", f"{limits.output_bytes // 1024} KiB", hit == "output"),
        SandboxLimit("processes", str(limits.max_processes), "processes" in runs_message.lower()),
        SandboxLimit(
            "file size",
            f"{limits.file_size_bytes // 2**20} MiB",
            "file larger" in runs_message.lower(),
        ),
    ]


def review_context(session: Session, settings: Settings, submission: Submission) -> dict[str, Any]:
    try:
        current_version: str | None = get_exercise(submission.exercise_id).version
    except UnknownExercise:
        current_version = None
    learner = session.get(User, submission.user_id) if submission.user_id else None
    overridden_by = (
        session.get(User, submission.override_by_id) if submission.override_by_id else None
    )
    return {
        "learner": learner,
        "limits": sandbox_limits(settings, submission),
        "limit_hit": any(limit.hit for limit in sandbox_limits(settings, submission)),
        "regrades": regrades_of(session, submission.id),
        "events": events(session, submission_id=submission.id),
        "current_version": current_version,
        "outdated": current_version is not None and submission.exercise_version != current_version,
        "overridden_by": overridden_by,
    }


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
    return {
        "submission": submission,
        "finished": submission.status in FINISHED,
        "checks": submission.checks or [],
        # line_chart escapes every text it puts in the SVG.
        "charts": [
            Markup(line_chart(PlotSeries.model_validate(plot))) for plot in submission.plots or []
        ],
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
        **result_context(submission),
    }
