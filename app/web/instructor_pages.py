"""The instructor's pages: gradebook (CSV), statistics, submissions, override, regrade, settings.

A learner of the course gets 403 on every one of them; anyone not in the course, 404.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.courses.audit import events, record_event
from app.courses.courses import (
    CourseError,
    Forbidden,
    NotFound,
    add_instructor,
    assignment_of,
    assignments_of,
    members,
    new_course_join_code,
    require_instructor,
    set_assignment,
)
from app.courses.gradebook import FILTERS, build_gradebook, exercise_stats, gradebook_csv
from app.courses.overrides import OverrideRejected, remove_override, set_override
from app.db import SessionDep
from app.grading.regrades import (
    RegradeRejected,
    outdated_count,
    regrade_progress,
    request_exercise_regrade,
    request_regrade,
)
from app.grading.submissions import get_submission
from app.models import (
    Course,
    CourseRole,
    LatePolicy,
    ScoringPolicy,
    Submission,
    User,
)
from app.people.accounts import find_user_by_email
from app.web.charts import bar_chart
from app.web.rendering import PageError, render
from app.web.sessions import CsrfViewerDep, Viewer, ViewerDep, signed_in_user
from app.web.submission_view import submission_context
from graders.exercises import list_exercises
from graders.report import diagnosis_name

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def instructor_course(session: Session, viewer: Viewer, course_id: str) -> tuple[User, Course]:
    user = signed_in_user(viewer)
    return user, require_instructor(session, user, course_id)


def reviewable_submission(
    session: Session, viewer: Viewer, submission_id: str
) -> tuple[User, Submission]:
    """A submission of a course the viewer teaches (a learner's own is 403 here, others 404)."""
    user = signed_in_user(viewer)
    submission = get_submission(session, submission_id)
    if submission is None:
        raise NotFound("There is no submission with this id.")
    if user.is_admin:
        return user, submission
    if submission.course_id is None:
        if submission.user_id == user.id:
            raise Forbidden("Only a course's instructors can change a score.")
        raise NotFound("There is no submission with this id, or it is not yours to see.")
    try:
        require_instructor(session, user, submission.course_id)
    except NotFound:
        if submission.user_id == user.id:
            raise Forbidden("Only a course's instructors can change a score.") from None
        raise NotFound("There is no submission with this id, or it is not yours to see.") from None
    return user, submission


@dataclass(frozen=True)
class GradebookQuery:
    """The gradebook's filter and sort, the same for the page and its CSV export."""

    q: str = ""
    only: str = "all"
    exercise: str = ""
    sort: str = "name"
    order: str = "asc"


GradebookQueryDep = Annotated[GradebookQuery, Depends()]


@router.get("/courses/{course_id}/gradebook")
def gradebook_page(
    request: Request,
    course_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    query: GradebookQueryDep,
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
    book = build_gradebook(session, course, **asdict(query))
    shown = {"q": book.q, "only": book.only, "exercise": book.exercise}

    def sort_link(key: str) -> str:
        direction = "desc" if book.sort == key and book.order == "asc" else "asc"
        if book.sort != key and key not in ("name", "email"):
            direction = "desc"  # scores: highest first on the first click
        return "?" + urlencode({**shown, "sort": key, "order": direction})

    return render(
        request,
        viewer,
        "gradebook.html",
        {
            "course": course,
            "book": book,
            "filters": FILTERS,
            "all_exercises": assignments_of(session, course.id),
            "sort_link": sort_link,
            "csv_link": f"/courses/{course.id}/gradebook.csv?"
            + urlencode({**shown, "sort": book.sort, "order": book.order}),
        },
    )


@router.get("/courses/{course_id}/gradebook.csv", response_model=None)
def gradebook_csv_export(
    course_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    query: GradebookQueryDep,
) -> Response:
    """Exactly the rows, columns and order of the page with the same query."""
    _, course = instructor_course(session, viewer, course_id)
    book = build_gradebook(session, course, **asdict(query))
    slug = "".join(c if c.isalnum() else "-" for c in course.name.lower()).strip("-") or "course"
    return PlainTextResponse(
        gradebook_csv(book),
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{slug}-gradebook.csv"',
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.get("/courses/{course_id}/exercises/{exercise_id}/stats")
def statistics_page(
    request: Request,
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    viewer: ViewerDep,
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
    assigned = assignment_of(session, course.id, exercise_id)
    stats = exercise_stats(session, course, assigned)
    return render(
        request,
        viewer,
        "stats.html",
        {
            "course": course,
            "assigned": assigned,
            "stats": stats,
            "exercises": assignments_of(session, course.id),
            "outdated": outdated_count(session, course_id=course.id, exercise_id=assigned.id),
            "diagnoses_chart": Markup(
                bar_chart(
                    "Submissions by diagnosis",
                    [(diagnosis_name(code), count) for code, count, _ in stats.diagnoses],
                    chart_id="diagnoses",
                )
            ),
            "scores_chart": Markup(
                bar_chart(
                    "Learners by counted score",
                    stats.score_distribution,
                    chart_id="scores",
                )
            ),
        },
    )


@router.get("/courses/{course_id}/submissions")
def course_submissions_page(
    request: Request,
    course_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    exercise: str = "",
    diagnosis: str = "",
    learner: str = "",
) -> HTMLResponse:
    """Every submission in the course, newest first, filtered by exercise, diagnosis, learner."""
    _, course = instructor_course(session, viewer, course_id)
    query = select(Submission, User).outerjoin(User, User.id == Submission.user_id)
    query = query.where(Submission.course_id == course.id)
    if exercise:
        query = query.where(Submission.exercise_id == exercise)
    if diagnosis:
        query = query.where(Submission.diagnosis == diagnosis)
    if learner:
        query = query.where(Submission.learner == learner)
    rows = session.execute(query.order_by(Submission.created_at.desc()).limit(500)).all()
    return render(
        request,
        viewer,
        "course_submissions.html",
        {
            "course": course,
            "rows": rows,
            "exercises": assignments_of(session, course.id),
            "titles": {e.id: e.title for e in list_exercises()},
            "exercise_filter": exercise,
            "diagnosis_filter": diagnosis,
            "learner_filter": learner,
        },
    )


def _done(submission_id: str, done: str) -> Response:
    return RedirectResponse(f"/submissions/{submission_id}?done={done}", status_code=303)


def _refused(
    request: Request, session: Session, viewer: Viewer, submission_id: str, message: str
) -> Response:
    context = submission_context(request, session, viewer, submission_id)
    return render(
        request, viewer, "submission.html", {**context, "error": message}, status_code=422
    )


@router.post("/submissions/{submission_id}/override", response_model=None)
def override_form(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    score: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    user, submission = reviewable_submission(session, viewer, submission_id)
    try:
        value = float(score)
        set_override(session, submission, score=value, reason=reason, by=user)
    except ValueError as exc:
        message = str(exc) if isinstance(exc, OverrideRejected) else f"{score!r} is not a number"
        return _refused(
            request, session, viewer, submission_id, f"The override was not set: {message}."
        )
    return _done(submission_id, "override-set")


@router.post("/submissions/{submission_id}/override/remove", response_model=None)
def remove_override_form(
    request: Request, submission_id: str, session: SessionDep, viewer: CsrfViewerDep
) -> Response:
    user, submission = reviewable_submission(session, viewer, submission_id)
    try:
        remove_override(session, submission, by=user)
    except OverrideRejected as exc:
        return _refused(request, session, viewer, submission_id, f"Nothing removed: {exc}.")
    return _done(submission_id, "override-removed")


@router.post("/submissions/{submission_id}/regrade", response_model=None)
def regrade_submission_form(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
) -> Response:
    user, submission = reviewable_submission(session, viewer, submission_id)
    try:
        request_regrade(session, submission, by=user)
    except RegradeRejected as exc:
        return _refused(request, session, viewer, submission_id, f"Not regraded: {exc}.")
    return _done(submission_id, "regrade")


@router.post("/courses/{course_id}/exercises/{exercise_id}/regrade", response_model=None)
def regrade_exercise_form(
    request: Request,
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    which: Annotated[str, Form()] = "outdated",
) -> Response:
    user, course = instructor_course(session, viewer, course_id)
    assigned = assignment_of(session, course.id, exercise_id)
    try:
        batch_id, _ = request_exercise_regrade(
            session,
            course_id=course.id,
            exercise_id=assigned.id,
            only_outdated=which != "all",
            by=user,
        )
    except RegradeRejected as exc:
        raise PageError(409, "Nothing to regrade", f"Nothing to regrade: {exc}.") from None
    return RedirectResponse(f"/courses/{course.id}/regrades/{batch_id}", status_code=303)


@router.get("/courses/{course_id}/regrades/{batch_id}")
def regrade_page(
    request: Request, course_id: str, batch_id: str, session: SessionDep, viewer: ViewerDep
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
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


def _parse_due(value: str, timezone: str) -> datetime | None:
    """A datetime-local value in the browser's time zone (UTC without JavaScript)."""
    if not value.strip():
        return None
    try:
        zone = ZoneInfo(timezone) if timezone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    try:
        local = datetime.fromisoformat(value.strip())
    except ValueError:
        raise CourseError(f"{value!r} is not a date and time") from None
    if local.tzinfo is None:
        local = local.replace(tzinfo=zone)
    return local.astimezone(UTC)


def settings_context(session: Session, course: Course) -> dict[str, object]:
    assigned = {a.id: a for a in assignments_of(session, course.id)}
    return {
        "course": course,
        "exercises": [(e, assigned.get(e.id)) for e in list_exercises()],
        "instructors": members(session, course.id, CourseRole.INSTRUCTOR),
        "learner_count": len(members(session, course.id, CourseRole.LEARNER)),
        "late_policies": [p.value for p in LatePolicy],
        "scoring_policies": [p.value for p in ScoringPolicy],
    }


SETTINGS_DONE = {
    "created": "Course created, with the unit's five exercises set (no due dates yet). "
    "Give your learners the join code below.",
    "join-code": "New join code made: the old one no longer works; enrolled learners stay.",
    "instructor": "Instructor added.",
    "saved": "Saved.",
}


@router.get("/courses/{course_id}/settings")
def settings_page(
    request: Request, course_id: str, session: SessionDep, viewer: ViewerDep, done: str = ""
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
    context = {**settings_context(session, course), "notice": SETTINGS_DONE.get(done)}
    return render(request, viewer, "settings.html", context)


def _settings_done(course_id: str, done: str, anchor: str = "") -> Response:
    return RedirectResponse(f"/courses/{course_id}/settings?done={done}{anchor}", status_code=303)


def _settings_refused(
    request: Request, session: Session, viewer: Viewer, course: Course, message: str
) -> Response:
    context = {**settings_context(session, course), "error": message}
    return render(request, viewer, "settings.html", context, status_code=422)


@router.post("/courses/{course_id}/settings/exercises/{exercise_id}", response_model=None)
def assignment_form(
    request: Request,
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    assigned: Annotated[str, Form()] = "",
    due_at: Annotated[str, Form()] = "",
    timezone: Annotated[str, Form()] = "",
    late_policy: Annotated[str, Form()] = "penalty",
    late_penalty_percent_per_day: Annotated[str, Form()] = "0",
    scoring_policy: Annotated[str, Form()] = "best",
) -> Response:
    user, course = instructor_course(session, viewer, course_id)
    try:
        try:
            penalty = float(late_penalty_percent_per_day or 0)
            late = LatePolicy(late_policy)
            scoring = ScoringPolicy(scoring_policy)
        except ValueError:
            raise CourseError(
                "choose a late policy, a penalty from 0 to 100, and a scoring policy"
            ) from None
        row = set_assignment(
            session,
            course_id=course.id,
            exercise_id=exercise_id,
            assigned=bool(assigned),
            due_at=_parse_due(due_at, timezone),
            late_policy=late,
            late_penalty_percent_per_day=penalty,
            scoring_policy=scoring,
        )
    except CourseError as exc:
        return _settings_refused(request, session, viewer, course, f"{exercise_id}: {exc}.")
    record_event(
        session,
        actor=user,
        action="assignment.set" if row else "assignment.removed",
        course_id=course.id,
        exercise=exercise_id,
        due_at=row.due_at.isoformat() if row and row.due_at else None,
        late_policy=row.late_policy if row else None,
        late_penalty_percent_per_day=row.late_penalty_percent_per_day if row else None,
        scoring_policy=row.scoring_policy if row else None,
    )
    return _settings_done(course.id, "saved", f"#ex-{exercise_id}")


@router.post("/courses/{course_id}/settings/join-code", response_model=None)
def join_code_form(course_id: str, session: SessionDep, viewer: CsrfViewerDep) -> Response:
    user, course = instructor_course(session, viewer, course_id)
    new_course_join_code(session, course)
    record_event(session, actor=user, action="course.join-code", course_id=course.id)
    return _settings_done(course.id, "join-code")


@router.post("/courses/{course_id}/settings/instructors", response_model=None)
def add_instructor_form(
    request: Request,
    course_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    email: Annotated[str, Form()] = "",
) -> Response:
    user, course = instructor_course(session, viewer, course_id)
    other = find_user_by_email(session, email)
    if other is None:
        return _settings_refused(
            request,
            session,
            viewer,
            course,
            f"No account has the email {email.strip()!r}: they need to sign up first.",
        )
    add_instructor(session, course=course, user=other)
    record_event(
        session,
        actor=user,
        action="course.instructor-added",
        course_id=course.id,
        email=other.email,
    )
    return _settings_done(course.id, "instructor")


@router.get("/courses/{course_id}/audit")
def audit_page(
    request: Request, course_id: str, session: SessionDep, viewer: ViewerDep
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
    return render(
        request,
        viewer,
        "audit.html",
        {"course": course, "events": events(session, course_id=course.id)},
    )
