"""The instructor's pages: gradebook (CSV), statistics, submissions, override, regrade, settings.

A learner of the course gets 403 on every one of them; anyone not in the course, 404.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup
from sqlalchemy.orm import Session

from app.audit import AuditAction, events, record_event
from app.courses.diagnosis_reports import reported_counts, reported_submission_ids
from app.courses.gradebook import (
    FILTERS,
    build_gradebook,
    counted_scores_changed,
    exercise_stats,
    gradebook_csv,
)
from app.courses.hints import (
    HintSettingsRefused,
    hint_open_counts,
    parse_rules,
    rules_of,
    save_rules,
)
from app.courses.membership import (
    AssignedExercise,
    CourseError,
    Forbidden,
    NotFound,
    add_instructor,
    assignment_of,
    assignments_of,
    check_late_penalty,
    in_units,
    members,
    new_course_join_code,
    require_instructor,
    set_assignment,
)
from app.courses.overrides import (
    OverrideRejected,
    check_override,
    counted_change,
    remove_override,
    set_override,
)
from app.db import SessionDep
from app.errors import as_sentence
from app.grading.dry_runs import MAX_ROWS_SHOWN, dry_run_report, request_dry_run
from app.grading.regrades import (
    RegradeRejected,
    outdated_count,
    regrade_candidates,
    regrade_progress,
    request_exercise_regrade,
    request_regrade,
)
from app.grading.submissions import get_submission
from app.models import (
    Assignment,
    Course,
    CourseRole,
    LatePolicy,
    RegradeReason,
    ScoringPolicy,
    Submission,
    User,
)
from app.people.accounts import find_user_by_email
from app.web.charts import bar_chart
from app.web.rendering import PageError, csv_download, file_slug, render
from app.web.review import (
    MAX_LISTED_SUBMISSIONS,
    SubmissionFilter,
    diagnosis_counts,
    filtered_submissions,
)
from app.web.sessions import CsrfViewerDep, Viewer, ViewerDep, signed_in_user
from app.web.submission_view import submission_context, submission_refused
from graders.exercise import Exercise
from graders.exercises import list_exercises, refused_exercises
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

    assigned = assignments_of(session, course.id)
    return render(
        request,
        viewer,
        "gradebook.html",
        {
            "course": course,
            "book": book,
            "filters": FILTERS,
            "all_exercises": assigned,
            # Each column's place in the course's order, also when one exercise is shown.
            "numbers": {a.id: place for place, a in enumerate(assigned, start=1)},
            "removed": assignments_of(session, course.id, removed=True),
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
    return csv_download(gradebook_csv(book), f"{file_slug(course.name, 'course')}-gradebook.csv")


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
            "reported": reported_counts(session, course.id, assigned.id),
            "hints_opened": hint_open_counts(session, course.id, assigned.id),
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
    reported: str = "",
) -> HTMLResponse:
    """Every submission in the course, newest first, filtered by exercise, diagnosis, learner,
    and to those whose diagnosis the learner reported as wrong."""
    _, course = instructor_course(session, viewer, course_id)
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
    score: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
    confirmed: Annotated[str, Form()] = "",
    list_query: ListQueryForm = "",
) -> Response:
    """First says what the override does to the counted score; saves it once confirmed."""
    user, submission = reviewable_submission(session, viewer, submission_id)
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
    confirmed: Annotated[str, Form()] = "",
    list_query: ListQueryForm = "",
) -> Response:
    """First says what removing the override does to the counted score, as setting one does;
    removes it once confirmed."""
    user, submission = reviewable_submission(session, viewer, submission_id)
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
    reason: Annotated[str, Form()] = "",
    note: Annotated[str, Form()] = "",
    list_query: ListQueryForm = "",
) -> Response:
    user, submission = reviewable_submission(session, viewer, submission_id)
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
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    which: str = "outdated",
) -> HTMLResponse:
    """Before a regrade of an exercise: how many submissions it will run, and why."""
    _, course = instructor_course(session, viewer, course_id)
    assigned = assignment_of(session, course.id, exercise_id)
    return _regrade_confirmation(request, session, viewer, course, assigned, which)


@router.post("/courses/{course_id}/exercises/{exercise_id}/regrade", response_model=None)
def regrade_exercise_form(
    request: Request,
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    which: Annotated[str, Form()] = "outdated",
    expected_count: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
    note: Annotated[str, Form()] = "",
) -> Response:
    user, course = instructor_course(session, viewer, course_id)
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
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    which: Annotated[str, Form()] = "outdated",
) -> Response:
    """Grade what the regrade would, changing nothing: the result is shown on its own page."""
    user, course = instructor_course(session, viewer, course_id)
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
    course_id: str,
    exercise_id: str,
    batch_id: str,
    session: SessionDep,
    viewer: ViewerDep,
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
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


def parse_due(value: str, timezone: str) -> datetime | None:
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


@dataclass(frozen=True)
class AssignmentFields:
    """One exercise's fieldset on the settings page: as saved, or as sent (with its error)."""

    exercise: Exercise
    assigned: bool
    due_at: str  # the datetime-local value: UTC as saved, or as typed in the sender's zone
    due_at_utc: str  # ISO UTC for time.js to show in the reader's zone ("" for typed values)
    late_policy: str
    late_penalty_percent_per_day: str
    scoring_policy: str
    show_solution: bool = False  # the reference, to learners whose due date has passed
    error: str = ""


def saved_fields(session: Session, course: Course) -> list[AssignmentFields]:
    assigned = {a.id: a.assignment for a in assignments_of(session, course.id)}
    # A removed exercise's kept policies: ticked again, it comes back with them.
    kept = {a.id: a.assignment for a in assignments_of(session, course.id, removed=True)}
    rows = []
    for exercise in list_exercises():
        row = assigned.get(exercise.id) or kept.get(exercise.id)
        due = row.due_at if row else None
        rows.append(
            AssignmentFields(
                exercise=exercise,
                assigned=exercise.id in assigned,
                due_at=due.strftime("%Y-%m-%dT%H:%M") if due else "",
                due_at_utc=due.isoformat() if due else "",
                late_policy=row.late_policy if row else LatePolicy.PENALTY,
                late_penalty_percent_per_day=f"{row.late_penalty_percent_per_day:g}"
                if row
                else "0",
                scoring_policy=row.scoring_policy if row else ScoringPolicy.BEST,
                show_solution=row.show_solution_after_due if row else False,
            )
        )
    return rows


def settings_context(
    session: Session,
    course: Course,
    fields: list[AssignmentFields] | None = None,
    hint_fields: dict[str, object] | None = None,
) -> dict[str, object]:
    rules = rules_of(course)
    return {
        "course": course,
        # The hints fieldset: as saved, or as sent with its error.
        "hint_fields": hint_fields
        or {
            "unlock_attempts": str(rules.unlock_attempts),
            "hide_fix": rules.hide_fix,
            "lesson_url": rules.lesson_url,
            "error": "",
        },
        "fields": fields if fields is not None else saved_fields(session, course),
        "units": in_units(assignments_of(session, course.id)),
        "instructors": members(session, course.id, CourseRole.INSTRUCTOR),
        "learner_count": len(members(session, course.id, CourseRole.LEARNER)),
        # Exercise folders this server does not serve, with why: the operator's to fix.
        "refused": refused_exercises(),
    }


SETTINGS_DONE = {
    "created": "Course created, with every exercise set (no due dates yet). "
    "Give your learners the join code below.",
    "saved": "Settings saved.",
    "unchanged": "Nothing had changed: nothing was saved.",
    "staff": "The course's staff is changed.",
    "list": "The exercise list's order and units are saved.",
}


@router.get("/courses/{course_id}/settings")
def settings_page(
    request: Request,
    course_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    done: str = "",
    changed: str = "",
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
    titles = {e.id: e.title for e in list_exercises()}
    changes = [titles.get(part, part) for part in changed.split(",") if part in titles]
    notice = SETTINGS_DONE.get(done)
    if notice and changes:
        notice = f"{notice} Changed: {', '.join(changes)}."
    context = {**settings_context(session, course), "notice": notice}
    return render(request, viewer, "settings.html", context)


def _sent_fields(
    exercise: Exercise,
    *,
    assigned: bool,
    due_at: str,
    late_policy: str,
    late_penalty_percent_per_day: str,
    scoring_policy: str,
    show_solution: bool,
    timezone: str,
) -> tuple[AssignmentFields, dict[str, Any] | None]:
    """One fieldset as sent, and the values to save (None when it has an error)."""
    fields = AssignmentFields(
        exercise,
        assigned,
        due_at.strip(),
        "",
        late_policy,
        late_penalty_percent_per_day.strip(),
        scoring_policy,
        show_solution,
    )
    try:
        try:
            penalty = float(late_penalty_percent_per_day or 0)
        except ValueError:
            raise CourseError(
                f"the late penalty {late_penalty_percent_per_day.strip()!r} is not a number"
            ) from None
        check_late_penalty(penalty)
        try:
            late, scoring = LatePolicy(late_policy), ScoringPolicy(scoring_policy)
        except ValueError:
            raise CourseError("choose what happens after the due date, and what counts") from None
        values = {
            "assigned": assigned,
            "due_at": parse_due(due_at, timezone),
            "late_policy": late,
            "late_penalty_percent_per_day": penalty,
            "scoring_policy": scoring,
            "show_solution_after_due": show_solution,
        }
    except CourseError as exc:
        return replace(fields, error=as_sentence(str(exc))), None
    return fields, values


def _assignment_state(row: Assignment | None) -> tuple[object, ...] | None:
    if row is None:
        return None
    return (
        row.due_at,
        row.late_policy,
        row.late_penalty_percent_per_day,
        row.scoring_policy,
        row.show_solution_after_due,
    )


@router.post("/courses/{course_id}/settings", response_model=None)
def settings_form(
    request: Request,
    course_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    exercise: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    due_at: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    late_policy: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    late_penalty_percent_per_day: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    scoring_policy: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    assigned: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    # The exercises whose reference is shown after the due date (a ticked box each).
    show_solution: Annotated[list[str], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    timezone: Annotated[str, Form()] = "",
    instructor_email: Annotated[str, Form()] = "",
    new_join_code: Annotated[str, Form()] = "",
    confirmed: Annotated[str, Form()] = "",
    hint_unlock_attempts: Annotated[str | None, Form()] = None,
    hints_hide_fix: Annotated[str, Form()] = "",
    lesson_url: Annotated[str, Form()] = "",
) -> Response:
    """The whole settings page is one form: every exercise's fields are saved together (or,
    when one has an error, none is, and the page comes back with everything as it was sent)."""
    user, course = instructor_course(session, viewer, course_id)
    columns = (exercise, due_at, late_policy, late_penalty_percent_per_day, scoring_policy)
    sent = _sent_assignments(
        columns, assigned=assigned, show_solution=show_solution, timezone=timezone
    )
    fields = [f for f, _ in sent]
    errors = [f"{f.exercise.title}: {f.error}" for f in fields if f.error]
    # A form without the hints fieldset (an older page) leaves the hint settings as they are.
    hint_rules, hint_fields = rules_of(course), None
    if hint_unlock_attempts is not None:
        hint_fields = {
            "unlock_attempts": hint_unlock_attempts,
            "hide_fix": bool(hints_hide_fix),
            "lesson_url": lesson_url,
            "error": "",
        }
        try:
            hint_rules = parse_rules(
                unlock_attempts=hint_unlock_attempts,
                hide_fix=bool(hints_hide_fix),
                lesson_url=lesson_url,
            )
        except HintSettingsRefused as exc:
            hint_fields["error"] = as_sentence(str(exc))
            errors.append(f"Hints: {as_sentence(str(exc))}")
    other = find_user_by_email(session, instructor_email) if instructor_email.strip() else None
    if instructor_email.strip() and other is None:
        errors.append(
            f"No account has the email {instructor_email.strip()!r}: they need to sign up "
            "before you can add them as an instructor."
        )
    if errors:
        context = {
            **settings_context(session, course, fields, hint_fields),
            "error": "Nothing was saved. " + " ".join(errors),
            "instructor_email": instructor_email,
            "new_join_code": bool(new_join_code),
        }
        return render(request, viewer, "settings.html", context, status_code=422)

    counted_changes = _counted_changes(session, course, sent)
    summary = ",".join(f"{exercise_id}:{n}" for exercise_id, _, n in counted_changes)
    if counted_changes and confirmed != summary:
        # Said before saving; a form changed since it was said is said again.
        context = {
            **settings_context(session, course, fields, hint_fields),
            "counted_changes": counted_changes,
            "confirm_summary": summary,
            "instructor_email": instructor_email,
            "new_join_code": bool(new_join_code),
        }
        return render(request, viewer, "settings.html", context)
    changes_by_exercise = {exercise_id: n for exercise_id, _, n in counted_changes}
    changed = _save_assignments(session, user, course, sent, changes_by_exercise)
    hints_changed = save_rules(session, course, hint_rules, by=user)
    if other is not None:
        add_instructor(session, course=course, user=other)
        record_event(
            session,
            actor=user,
            action=AuditAction.COURSE_INSTRUCTOR_ADDED,
            course_id=course.id,
            email=other.email,
        )
    if new_join_code:
        new_course_join_code(session, course)
        record_event(session, actor=user, action=AuditAction.COURSE_JOIN_CODE, course_id=course.id)
    done = (
        "saved" if changed or hints_changed or other is not None or new_join_code else "unchanged"
    )
    query = urlencode({"done": done, **({"changed": ",".join(changed)} if changed else {})})
    return RedirectResponse(f"/courses/{course.id}/settings?{query}", status_code=303)


def _sent_assignments(
    columns: tuple[list[str], ...],
    *,
    assigned: list[str],
    show_solution: list[str],
    timezone: str,
) -> list[tuple[AssignmentFields, dict[str, Any] | None]]:
    """Each exercise's row of the form, read: its fields as sent, and its values (None when
    one has an error)."""
    if not columns[0] or len({len(column) for column in columns}) != 1:
        raise PageError(422, "Not accepted", "The settings form was incomplete: reload the page.")
    known = {e.id: e for e in list_exercises()}
    sent = []
    for exercise_id, due, late, penalty, scoring in zip(*columns, strict=True):
        if exercise_id not in known:
            raise PageError(422, "Not accepted", f"There is no exercise called “{exercise_id}”.")
        sent.append(
            _sent_fields(
                known[exercise_id],
                assigned=exercise_id in assigned,
                due_at=due,
                late_policy=late,
                late_penalty_percent_per_day=penalty,
                scoring_policy=scoring,
                show_solution=exercise_id in show_solution,
                timezone=timezone,
            )
        )
    return sent


def _counted_changes(
    session: Session, course: Course, sent: list[tuple[AssignmentFields, dict[str, Any] | None]]
) -> list[tuple[str, str, int]]:
    """(exercise id, title, learners whose counted score changes) for each exercise still set
    whose new policy changes any."""
    changes = []
    for fields_sent, values in sent:
        if values is None or not values["assigned"]:
            continue
        policy = {key: value for key, value in values.items() if key != "assigned"}
        exercise = fields_sent.exercise
        count = counted_scores_changed(
            session, course, exercise, Assignment(exercise_id=exercise.id, **policy)
        )
        if count:
            changes.append((exercise.id, exercise.title, count))
    return changes


def _save_assignments(
    session: Session,
    user: User,
    course: Course,
    sent: list[tuple[AssignmentFields, dict[str, Any] | None]],
    counted_changes: dict[str, int],
) -> list[str]:
    """Store every exercise's settings; audit and return the ids of those that changed."""
    before = {a.id: _assignment_state(a.assignment) for a in assignments_of(session, course.id)}
    changed = []
    for fields_sent, values in sent:
        assert values is not None
        exercise_id = fields_sent.exercise.id
        row = set_assignment(session, course_id=course.id, exercise_id=exercise_id, **values)
        if _assignment_state(row) == before.get(exercise_id):
            continue
        changed.append(exercise_id)
        record_event(
            session,
            actor=user,
            action=AuditAction.ASSIGNMENT_SET if row else AuditAction.ASSIGNMENT_REMOVED,
            course_id=course.id,
            exercise=exercise_id,
            due_at=row.due_at.isoformat() if row and row.due_at else None,
            late_policy=row.late_policy if row else None,
            late_penalty_percent_per_day=row.late_penalty_percent_per_day if row else None,
            scoring_policy=row.scoring_policy if row else None,
            show_solution_after_due=row.show_solution_after_due if row else None,
            counted_scores_changed=counted_changes.get(exercise_id, 0),
        )
    return changed


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
