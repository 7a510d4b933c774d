"""The learner's pages: a course's home, an exercise (editor, upload), a result, the history.

One page family over 400 lines: what a learner opens, from a course's home to a result.

Practice works without a course, for anyone: a visitor who is not signed in is an anonymous
learner kept in a cookie. Every submission page is for its learner, the instructors of its
course and site admins only; to anyone else it does not exist (404).
"""

from __future__ import annotations

import io
import secrets
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import (
    LEARNER_COOKIE,
    SignedInUserDep,
    SignInRequired,
    Viewer,
    ViewerDep,
    anonymous_learner,
    client_address,
    signed_in_user,
)
from app.courses.attempts import note_first_open
from app.courses.gradebook import learner_cells, practice_assignment, progress_of, standings_of
from app.courses.membership import (
    AssignedExercise,
    assignment_of,
    assignments_of,
    can_view_submission,
    courses_of,
    require_member,
)
from app.courses.practice import courses_setting
from app.db import SessionDep, keep_on_error_response
from app.grading.drafts import opening_code, save_draft
from app.grading.intake import Idempotency, Upload, accept_submission, submission_limits
from app.grading.regrades import changed_by_regrade
from app.grading.submissions import (
    AssignmentClosed,
    SubmissionRejected,
    check_open,
    get_submission,
    learner_limits,
)
from app.models import Course, CourseRole, Submission, User, utc_now
from app.rendering import PageError, render
from app.settings import Settings, SettingsDep
from app.submission_history import submissions_of
from app.web.kept_submissions import (
    forget_kept_submission,
    keep_if_session_ended,
    kept_submission_of,
)
from app.web.review import review_position
from app.web.submission_view import result_context, submission_context, viewable_submission
from graders.exercise import Exercise
from graders.exercises import UnknownExercise, get_exercise, list_exercises

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

# A learner's code in one course, as one zip: at most this many submissions (the newest).
MAX_SUBMISSIONS_IN_ZIP = 2000
# The course home lists the learner's results a regrade changed, at most this many (newest).
MAX_REGRADE_CHANGES_SHOWN = 5


def new_learner_id() -> str:
    """An anonymous learner, kept in a cookie, for practice without an account."""
    return f"web:{secrets.token_urlsafe(16)}"


def find_exercise(exercise_id: str) -> Exercise:
    try:
        return get_exercise(exercise_id)
    except UnknownExercise:
        raise PageError(404, "Not found", f"There is no exercise called “{exercise_id}”.") from None


def _unit(
    session: Session,
    viewer: Viewer,
    request: Request,
    course: Course | None,
) -> list[tuple[AssignedExercise, Any]]:
    """The exercises in the unit's order with this learner's state on each."""
    user_id = viewer.user.id if viewer.user else None
    if course is not None:
        exercises = assignments_of(session, course.id, user_id)
        cells = learner_cells(session, exercises, course_id=course.id, user_id=user_id)
    else:
        exercises = [practice_assignment(e) for e in list_exercises()]
        cells = learner_cells(
            session,
            exercises,
            course_id=None,
            user_id=user_id,
            anonymous_learner=anonymous_learner(request, viewer),
        )
    return list(zip(exercises, cells, strict=True))


def exercise_context(
    request: Request,
    session: Session,
    viewer: Viewer,
    settings: Settings,
    exercise: Exercise,
    course: Course | None,
    assigned: AssignedExercise | None,
    code: str,
) -> dict[str, Any]:
    limit = submission_limits(settings).per_learner
    closed = ""  # why no submission is accepted here now, said on the page
    limits = None
    if assigned is not None:
        user = signed_in_user(viewer)  # a course's page is for its members
        limits = learner_limits(session, assigned, user_id=user.id, learner=user.email)
        try:
            check_open(assigned, utc_now(), limits)
        except AssignmentClosed as exc:
            closed = str(exc)
    recent = submissions_of(
        session,
        user_id=viewer.user.id if viewer.user else None,
        anonymous_learner=anonymous_learner(request, viewer),
        course_id=course.id if course else None,
        exercise_id=exercise.id,
        limit=5,
    )
    base = exercise_path(course, exercise.id)
    unit = _unit(session, viewer, request, course)
    return {
        "exercise": exercise,
        "course": course,
        "assigned": assigned,
        "prompt_body": _without_title(exercise.prompt_markdown),
        "code": code,
        "action": base,
        "unit": unit,
        "next_exercise": _next_exercise(session, viewer, unit, exercise, course),
        "recent": recent,
        "rate_limit": limit.describe("submission") if limit and limit.count > 0 else None,
        "closed": closed,
        "limits": limits,
        # The reference, once the course releases it to this learner (membership.py says when).
        "solution": assigned.released_solution(utc_now()) if assigned is not None else None,
        "now": utc_now(),
        "max_upload_kib": settings.max_upload_bytes // 1024,
        # Practice: the courses of the learner's that set this exercise, where it would count.
        "in_courses": (
            courses_setting(session, viewer.user.id if viewer.user else None).get(exercise.id, [])
            if course is None
            else []
        ),
    }


def exercise_path(course: Course | None, exercise_id: str) -> str:
    """The exercise's page: in the course, or practice."""
    return (
        f"/courses/{course.id}/exercises/{exercise_id}" if course else f"/exercises/{exercise_id}"
    )


@dataclass(frozen=True)
class NextExercise:
    title: str
    url: str
    # Why the learner can submit there no more (its lock after the due date, their attempts
    # or their timed attempt's time used up): the link says so (it can be read, not submitted
    # to). None: open to them.
    closed: AssignmentClosed | None = None


def _next_exercise(
    session: Session,
    viewer: Viewer,
    unit: list[tuple[AssignedExercise, Any]],
    exercise: Exercise,
    course: Course | None,
) -> NextExercise | None:
    """The unit's next exercise, once this one is solved (the page offers to go on)."""
    ids = [assigned.exercise.id for assigned, _ in unit]
    if exercise.id not in ids:
        return None
    here = ids.index(exercise.id)
    if unit[here][1].state != "solved" or here + 1 == len(unit):
        return None
    following = unit[here + 1][0]
    closed = None
    if course is not None:
        # The rule that refuses a submission there, as it would refuse one now.
        user = signed_in_user(viewer)
        limits = learner_limits(session, following, user_id=user.id, learner=user.email)
        try:
            check_open(following, utc_now(), limits)
        except AssignmentClosed as exc:
            closed = exc
    return NextExercise(following.exercise.title, exercise_path(course, following.id), closed)


def _without_title(prompt_markdown: str) -> str:
    """The prompt without its leading `# Title` line: the page puts the title first itself,
    with the way to the editor right under it (on a phone the prompt is long)."""
    first, _, rest = prompt_markdown.lstrip("\n").partition("\n")
    return rest if first.startswith("# ") else prompt_markdown


def _editable_code(
    request: Request,
    session: Session,
    viewer: Viewer,
    exercise: Exercise,
    course: Course | None,
    edit: str | None,
    practice_code: bool = False,
) -> dict[str, Any]:
    """What the editor opens on, as the page's context: code kept from a submission whose
    session had ended, else a submission of the viewer's to `edit`, else (`practice_code`, in a
    course: "Do it in <course>") their latest practice code, else their latest code (draft,
    latest submission, starter); and what the page's draft script needs."""
    user_id = viewer.user.id if viewer.user else None
    opening = opening_code(
        session,
        user_id=user_id,
        anonymous_learner=anonymous_learner(request, viewer),
        course_id=course.id if course else None,
        exercise=exercise,
    )
    code, kept = opening.code, kept_submission_of(request, session)
    carried: Submission | None = None
    carried_practice_at: datetime | None = None
    if kept is not None:
        code = kept.code
    elif practice_code and course is not None and user_id is not None:
        practice = opening_code(
            session, user_id=user_id, anonymous_learner=None, course_id=None, exercise=exercise
        )
        if practice.saved_at is not None:  # they have practice code: not the starter
            code, carried_practice_at = practice.code, practice.saved_at
    elif edit:
        previous = get_submission(session, edit)
        if (
            previous is not None
            and previous.exercise_id == exercise.id
            and can_view_submission(
                session, viewer.user, anonymous_learner(request, viewer), previous
            )
        ):
            code = previous.code
            if course is not None and previous.course_id is None:
                carried = previous  # practice code taken to the course: not submitted here yet
    place = course.id if course else "practice"
    return {
        "code": code,
        "kept": kept is not None,
        "carried": carried,
        "carried_practice_at": carried_practice_at,
        "draft": {
            "key": f"{user_id or 'anon'}:{place}:{exercise.id}",
            "url": f"/drafts/{place}/{exercise.id}" if user_id else "",
            "saved_at": opening.saved_at.isoformat() if opening.saved_at else "",
        },
    }


@router.get("/exercises/{exercise_id}")
def practice_page(
    request: Request,
    exercise_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: ViewerDep,
    edit: str | None = None,
) -> HTMLResponse:
    """Practice outside any course: the prompt and the editor."""
    exercise = find_exercise(exercise_id)
    opening = _editable_code(request, session, viewer, exercise, None, edit)
    context = exercise_context(
        request, session, viewer, settings, exercise, None, None, opening["code"]
    )
    return render(request, viewer, "exercise.html", {**context, **opening})


@router.get("/courses/{course_id}/exercises/{exercise_id}")
def course_exercise_page(
    request: Request,
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: ViewerDep,
    user: SignedInUserDep,
    edit: str | None = None,
    code: str = "",
) -> HTMLResponse:
    """A course's exercise; `code=practice` opens the editor on the learner's practice code."""
    course, role = require_member(session, user, course_id)
    assigned = assignment_of(session, course.id, exercise_id, user.id)
    if role == CourseRole.LEARNER:
        note_first_open(session, course_id=course.id, exercise_id=assigned.id, user_id=user.id)
    opening = _editable_code(
        request, session, viewer, assigned.exercise, course, edit, code == "practice"
    )
    context = exercise_context(
        request, session, viewer, settings, assigned.exercise, course, assigned, opening["code"]
    )
    # An instructor lands here from an LMS link: the page leads to the course's marking too.
    is_instructor = role is CourseRole.INSTRUCTOR
    return render(
        request, viewer, "exercise.html", {**context, **opening, "is_instructor": is_instructor}
    )


def _submit(
    request: Request,
    session: Session,
    settings: Settings,
    viewer: Viewer,
    exercise: Exercise,
    course: Course | None,
    assigned: AssignedExercise | None,
    code: str,
    file: UploadFile | None,
) -> Response:
    # Browsers send textarea lines with CRLF.
    code = code.replace("\r\n", "\n")
    user = viewer.user
    learner, new_learner = _learner_of(request, viewer)
    in_place = _wants_json(request)
    try:
        accepted = accept_submission(
            session,
            settings,
            exercise_id=exercise.id,
            learner=learner,
            code=code,
            upload=Upload(file.filename, file.file) if file is not None and file.filename else None,
            user_id=user.id if user else None,
            course_id=course.id if course else None,
            assigned=assigned,
            client_address=client_address(request),
            # The page's script sends one per click, so a retried post makes one submission.
            idempotency=Idempotency.from_header(
                f"user:{user.id}" if user else f"learner:{learner}",
                request.headers.get("idempotency-key"),
            ),
        )
    except SubmissionRejected as exc:
        if in_place:
            return JSONResponse(
                {"detail": str(exc), **exc.json_fields()},
                status_code=exc.status_code,
                headers=exc.headers,
            )
        return _refused_page(
            request, session, settings, viewer, exercise, course, assigned, code, exc
        )
    submission = accepted.submission
    if user is not None:
        # The page opens on it next time; a body too large was refused above.
        save_draft(
            session,
            user_id=user.id,
            course_id=course.id if course else None,
            exercise_id=exercise.id,
            code=submission.code,
            max_code_bytes=settings.max_code_bytes,
        )
    return _submitted(request, session, submission.id, in_place=in_place, new_learner=new_learner)


def _learner_of(request: Request, viewer: Viewer) -> tuple[str, str | None]:
    """Who submits: the signed-in user's email, else the browser's anonymous learner id; and
    that id when it is new here (for its cookie), else None."""
    if viewer.user is not None:
        return viewer.user.email, None
    learner = anonymous_learner(request, viewer)
    if learner:
        return learner, None
    new_learner = new_learner_id()
    return new_learner, new_learner


def _refused_page(
    request: Request,
    session: Session,
    settings: Settings,
    viewer: Viewer,
    exercise: Exercise,
    course: Course | None,
    assigned: AssignedExercise | None,
    code: str,
    exc: SubmissionRejected,
) -> Response:
    """The form again, with the learner's code and what to fix; the status says why."""
    context = exercise_context(request, session, viewer, settings, exercise, course, assigned, code)
    opening = _editable_code(request, session, viewer, exercise, course, None)
    return render(
        request,
        viewer,
        "exercise.html",
        {**context, **opening, "code": code, "kept": False, "error": str(exc)},
        status_code=exc.status_code,
        headers=exc.headers,
    )


def _submitted(
    request: Request,
    session: Session,
    submission_id: str,
    *,
    in_place: bool,
    new_learner: str | None,
) -> Response:
    """Where the accepted submission is: JSON for the page's script, else a redirect."""
    page_url = f"/submissions/{submission_id}"
    response: Response
    if in_place:
        response = JSONResponse(
            {
                "id": submission_id,
                "url": page_url,
                "events": f"{page_url}/events",
                "result": f"{page_url}/result",
            },
            status_code=202,
        )
    else:
        response = RedirectResponse(page_url, status_code=303)
    forget_kept_submission(request, session, response)
    if new_learner:
        # Lax: an LMS iframe may not send it, and then the learner is a new anonymous one.
        response.set_cookie(
            LEARNER_COOKIE, new_learner, max_age=365 * 24 * 3600, httponly=True, samesite="lax"
        )
    return response


def _wants_json(request: Request) -> bool:
    """The exercise page's script submits in the background and asks for JSON; a plain form
    post (no JavaScript) is answered with a page, as always."""
    return "application/json" in request.headers.get("accept", "")


def _session_ended(request: Request, session: Session, kept: Response) -> Response:
    """The code was kept (the session had ended); the page's script gets where to go in JSON,
    a 401, instead of a redirect its fetch would follow out of sight. The code stays kept."""
    if not _wants_json(request):
        return kept
    keep_on_error_response(session)
    answer = JSONResponse(
        {
            "detail": "Your session had ended: your code is kept. Sign in to submit it.",
            "location": kept.headers["location"],
        },
        status_code=401,
    )
    answer.raw_headers.extend(h for h in kept.raw_headers if h[0] == b"set-cookie")
    return answer


@router.post("/exercises/{exercise_id}", response_model=None)
def submit_practice(
    request: Request,
    exercise_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: ViewerDep,
    code: Annotated[str, Form()] = "",
    file: Annotated[UploadFile | None, File()] = None,
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    exercise = find_exercise(exercise_id)
    ended = keep_if_session_ended(
        request, session, settings, viewer, csrf_token=csrf_token, code=code
    )
    if ended is not None:
        return _session_ended(request, session, ended)
    return _submit(request, session, settings, viewer, exercise, None, None, code, file)


@router.post("/courses/{course_id}/exercises/{exercise_id}", response_model=None)
def submit_in_course(
    request: Request,
    course_id: str,
    exercise_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: ViewerDep,
    code: Annotated[str, Form()] = "",
    file: Annotated[UploadFile | None, File()] = None,
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    ended = keep_if_session_ended(
        request, session, settings, viewer, csrf_token=csrf_token, code=code
    )
    if ended is not None:
        return _session_ended(request, session, ended)
    user = signed_in_user(viewer)
    course, _ = require_member(session, user, course_id)
    assigned = assignment_of(session, course.id, exercise_id, user.id)
    return _submit(
        request,
        session,
        settings,
        viewer,
        assigned.exercise,
        course,
        assigned,
        code,
        file,
    )


@router.get("/courses/{course_id}")
def course_home(
    request: Request, course_id: str, session: SessionDep, viewer: ViewerDep, user: SignedInUserDep
) -> HTMLResponse:
    """The course's exercises in order, with due dates, and the learner's state and score."""
    course, role = require_member(session, user, course_id)
    unit = _unit(session, viewer, request, course)
    now = utc_now()
    upcoming = [
        assigned
        for assigned, cell in unit
        if assigned.due_at is not None and assigned.due_at >= now and cell.state != "solved"
    ]
    mine = submissions_of(session, user_id=user.id, course_id=course.id)
    changes = changed_by_regrade(session, [s.id for s in mine])
    titles = {a.exercise.id: a.exercise.title for a, _ in unit}
    return render(
        request,
        viewer,
        "course.html",
        {
            "regrade_changes": [
                (s, titles.get(s.exercise_id, s.exercise_id), changes[s.id])
                for s in mine
                if s.id in changes
            ][:MAX_REGRADE_CHANGES_SHOWN],
            "course": course,
            "role": role,
            "is_instructor": role == CourseRole.INSTRUCTOR,
            "unit": unit,
            "progress": progress_of([cell for _, cell in unit]),
            "next_due": min(upcoming, key=lambda a: a.due_at or now, default=None),
            "scoring_policies": sorted({a.assignment.scoring_policy for a, _ in unit}),
            "now": now,
        },
    )


def _file_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d-%H%M%SZ")


def _code_file_name(submission: Submission) -> str:
    return f"{submission.exercise_id}-{_file_time(submission.created_at)}-{submission.id[:8]}.py"


def _download_headers(filename: str) -> dict[str, str]:
    return {
        "Content-Disposition": f'attachment; filename="{filename}"',
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    }


@router.get("/submissions/{submission_id}/code.py", response_model=None)
def submission_code_download(
    request: Request, submission_id: str, session: SessionDep, viewer: ViewerDep
) -> Response:
    """The submitted code as a .py file, for whoever may see the submission."""
    submission = viewable_submission(request, session, viewer, submission_id)
    return Response(
        submission.code,
        media_type="text/x-python; charset=utf-8",
        headers=_download_headers(_code_file_name(submission)),
    )


@router.get("/courses/{course_id}/my-code.zip", response_model=None)
def course_code_download(course_id: str, session: SessionDep, user: SignedInUserDep) -> Response:
    """Every submission of the viewer's in the course, one .py per submission in a folder per
    exercise, newest last."""
    course, _ = require_member(session, user, course_id)
    mine = submissions_of(
        session, user_id=user.id, course_id=course.id, limit=MAX_SUBMISSIONS_IN_ZIP
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for submission in reversed(mine):
            name = f"{submission.exercise_id}/{_code_file_name(submission)}"
            archive.writestr(name, submission.code)
    slug = "".join(c if c.isalnum() else "-" for c in course.name.lower()).strip("-") or "course"
    return Response(
        buffer.getvalue(),
        media_type="application/zip",
        headers=_download_headers(f"{slug}-my-code.zip"),
    )


# What an instructor's action on a submission page says once done (redirected with ?done=).
DONE_MESSAGES = {
    "override-set": "Override set: it counts instead of the graded score until you remove it.",
    "override-removed": "Override removed: the graded score counts again.",
    "regrade": "Regrading: the new result replaces the old one, which is kept below.",
    "reported": "Sent: your instructors see your note with this submission.",
}


@router.get("/submissions/{submission_id}")
def submission_page(
    request: Request,
    submission_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    done: str = "",
    list_query: Annotated[str, Query(alias="list")] = "",
) -> HTMLResponse:
    """A submission; `list` (the course submissions page's filter) when an instructor goes
    through that list: the page then links the previous and the next submission in it."""
    context = submission_context(request, session, viewer, submission_id)
    position = (
        review_position(session, context["submission"], list_query)
        if context["review"] is not None
        else None
    )
    return render(
        request,
        viewer,
        "submission.html",
        {**context, "notice": DONE_MESSAGES.get(done), "position": position},
    )


@router.get("/submissions/{submission_id}/result")
def submission_result(
    request: Request, submission_id: str, session: SessionDep, viewer: ViewerDep
) -> HTMLResponse:
    """The result section alone, which the submission page polls until it is finished."""
    submission = viewable_submission(request, session, viewer, submission_id)
    return render(request, viewer, "_result.html", result_context(session, submission))


@router.get("/history")
def history(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    course: str = "",
    exercise: str = "",
) -> HTMLResponse:
    """Every submission of the viewer's (in one course, or practice, or all), newest first."""
    user: User | None = viewer.user
    anonymous = anonymous_learner(request, viewer)
    chosen: Course | None = None
    if course and course != "practice":
        if user is None:
            raise SignInRequired()
        chosen, _ = require_member(session, user, course)
    rows = submissions_of(
        session,
        user_id=user.id if user else None,
        anonymous_learner=anonymous,
        course_id=chosen.id if chosen else None,
        any_course=not course,
        exercise_id=exercise or None,
    )
    courses = {c.course.id: c.course for c in courses_of(session, user)} if user else {}
    titles = {e.id: e.title for e in list_exercises()}
    return render(
        request,
        viewer,
        "history.html",
        {
            "rows": rows,
            # Why a row counts other than as graded: late, locked, overridden.
            "counted_words": {
                key: words for key, (_, words) in standings_of(session, rows).items()
            },
            "courses": courses,
            "titles": titles,
            "course_filter": course,
            "exercise_filter": exercise,
            "chosen": chosen,
        },
    )
