"""The learner's API, `/api/v1/me`: what `loopgrade-client` and the notebook magic call, with
a personal access token (app/people/tokens.py).

The token acts for its learner alone: submissions are theirs (the web form's rules: course
membership, due-date locks, the per-learner rate limit), and only their own submissions are
read, whatever their role; another's is answered exactly like a missing one. The course API
keys (`app/api/routes.py`) are the LMSs' and are not accepted here.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, HTTPException, Query, Request, Response, UploadFile, status
from fastapi.responses import StreamingResponse
from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.access import client_address
from app.api.learner_schemas import (
    CourseExercisesOut,
    ExerciseStateOut,
    LearnerExercisesOut,
    LearnerSubmissionCreate,
    LearnerSubmissionOut,
    PracticeCheckOut,
    PracticeCheckResultOut,
    PracticeKitOut,
    PracticeTraceIn,
)
from app.api.routes import IdempotencyKeyHeader, accepted_answer, answered, submission_out
from app.api.schemas import ErrorOut, SubmissionAccepted
from app.charts import line_chart
from app.courses.counted import Cell, Standing
from app.courses.gradebook import learner_cells, practice_assignment, standing_of, standings_of
from app.courses.membership import (
    AssignedExercise,
    assignment_of,
    assignments_of,
    courses_of,
    require_member,
)
from app.db import SessionDep, SessionFactory
from app.grading.intake import Accepted, Idempotency, Upload, accept_submission
from app.grading.jobs import user_learner_key
from app.grading.results import shown_result
from app.grading.submissions import get_submission
from app.models import Submission, utc_now
from app.people.tokens import TokenHolder, TokenHolderDep
from app.progress import progress_stream_response
from app.settings import Settings, SettingsDep
from graders.exercise import for_learner
from graders.exercises import UnknownExercise, get_exercise, list_exercises
from graders.grading import judge_visible_trace, trusted_trajectories
from graders.kinds import SANDBOX_PROGRAM
from graders.report import diagnosis_name

router = APIRouter(prefix="/api/v1/me", tags=["learner"])

# The harness a practice kit is for: the client ships its own copy (`python -m graders
# client-files`) and runs it only when its digest is this one.
HARNESS_SHA256 = hashlib.sha256(SANDBOX_PROGRAM.encode()).hexdigest()

_token_errors: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorOut, "description": "No token, or an unknown, revoked or expired one."}
}
_submit_errors: dict[int | str, dict[str, object]] = {
    **_token_errors,
    403: {
        "model": ErrorOut,
        "description": "Closed for this learner: locked after their due date, their attempts "
        "used up, or their time for a timed exercise run out (`detail` says which).",
    },
    404: {"model": ErrorOut, "description": "Not your course, or the course does not set it."},
    413: {"model": ErrorOut, "description": "The code or file is over the size limit."},
    422: {"model": ErrorOut, "description": "Unknown exercise, unusable file, syntax error."},
    429: {"model": ErrorOut, "description": "Your submission rate limit; see `Retry-After`."},
    503: {"model": ErrorOut, "description": "The graders are busy; see `Retry-After`."},
}
_not_found: dict[int | str, dict[str, object]] = {
    **_token_errors,
    404: {"model": ErrorOut, "description": "No such submission of yours."},
}


def _exercise_state(assigned: AssignedExercise, cell: Cell, now: datetime) -> ExerciseStateOut:
    exercise = assigned.exercise
    return ExerciseStateOut(
        id=exercise.id,
        title=exercise.title,
        unit=assigned.unit,
        signature=exercise.signature,
        entry_point=exercise.entry_point,
        max_score=exercise.max_score,
        state=cell.state,
        score=cell.score,
        attempts=cell.attempts,
        due_at=assigned.due_at,
        due_extended=assigned.due_extended,
        max_attempts=assigned.max_attempts,
        time_limit_minutes=assigned.time_limit_minutes,
        solution=assigned.released_solution(now),
    )


@router.get("/exercises", response_model=LearnerExercisesOut, responses=_token_errors)
def read_my_exercises(session: SessionDep, holder: TokenHolderDep) -> Response:
    """Practice and each of your courses: their exercises with your state and score on each."""
    user, now = holder.user, utc_now()
    practice = [practice_assignment(exercise) for exercise in list_exercises()]
    practice_cells = learner_cells(session, practice, course_id=None, user_id=user.id)
    courses = []
    for mine in courses_of(session, user):
        assigned = assignments_of(session, mine.course.id, user.id)
        cells = learner_cells(session, assigned, course_id=mine.course.id, user_id=user.id)
        courses.append(
            CourseExercisesOut(
                id=mine.course.id,
                name=mine.course.name,
                role=mine.role,
                exercises=[
                    _exercise_state(a, c, now) for a, c in zip(assigned, cells, strict=True)
                ],
            )
        )
    return answered(
        LearnerExercisesOut(
            email=user.email,
            practice=[
                _exercise_state(a, c, now) for a, c in zip(practice, practice_cells, strict=True)
            ],
            courses=courses,
        )
    )


@router.post(
    "/submissions",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionAccepted,
    responses=_submit_errors,
)
def submit_mine(
    request: Request,
    body: LearnerSubmissionCreate,
    session: SessionDep,
    settings: SettingsDep,
    holder: TokenHolderDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Queue your code for grading; follow `events_url` (or read `Location`) for the result."""
    accepted = _accept_mine(
        request,
        session,
        settings,
        holder,
        idempotency_key,
        body.exercise,
        body.course,
        code=body.code,
    )
    return accepted_answer(accepted, f"{router.prefix}/submissions")


@router.post(
    "/submissions/upload",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionAccepted,
    responses=_submit_errors,
)
def submit_my_file(
    request: Request,
    exercise: Annotated[str, Form(description="Exercise id.")],
    file: Annotated[UploadFile, Form(description="A .py file or a .ipynb notebook.")],
    session: SessionDep,
    settings: SettingsDep,
    holder: TokenHolderDep,
    course: Annotated[str | None, Form(description="A course id of yours.")] = None,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Queue your `.py` or `.ipynb` for grading (multipart/form-data), as the web form does."""
    accepted = _accept_mine(
        request,
        session,
        settings,
        holder,
        idempotency_key,
        exercise,
        course or None,
        upload=Upload(file.filename or "", file.file),
    )
    return accepted_answer(accepted, f"{router.prefix}/submissions")


def _accept_mine(
    request: Request,
    session: Session,
    settings: Settings,
    holder: TokenHolder,
    idempotency_key: str | None,
    exercise_id: str,
    course_id: str | None,
    *,
    code: str = "",
    upload: Upload | None = None,
) -> Accepted:
    user = holder.user
    assigned = None
    if course_id is not None:
        course, _ = require_member(session, user, course_id)
        assigned = assignment_of(session, course.id, exercise_id, user.id)
    return accept_submission(
        session,
        settings,
        exercise_id=exercise_id,
        learner=user.email,
        code=code,
        upload=upload,
        user_id=user.id,
        course_id=course_id,
        assigned=assigned,
        client_address=client_address(request),
        # The web form's owner: a retry is matched whichever surface the learner used.
        idempotency=Idempotency.from_header(f"user:{user.id}", idempotency_key),
        personal_token_id=holder.token.id,
    )


def _my_submission(session: Session, holder: TokenHolder, submission_id: str) -> Submission:
    """The learner's own submission; anyone else's is answered as a missing one."""
    submission = get_submission(session, submission_id)
    if submission is None or submission.user_id != holder.user.id:
        raise HTTPException(404, detail=f"you have no submission with id {submission_id[:100]!r}")
    return submission


def _released_solutions(session: Session, holder: TokenHolder) -> dict[tuple[str, str], str]:
    """The reference solutions released to the learner now, by (course id, exercise id): in
    their courses only, by the exercise page's rule (`AssignedExercise.released_solution`)."""
    user, now = holder.user, utc_now()
    released = {}
    for mine in courses_of(session, user):
        for assigned in assignments_of(session, mine.course.id, user.id):
            solution = assigned.released_solution(now)
            if solution is not None:
                released[(mine.course.id, assigned.id)] = solution
    return released


def _learner_submission_out(
    submission: Submission,
    counted: tuple[Standing | None, str | None],
    solutions: dict[tuple[str, str], str],
) -> LearnerSubmissionOut:
    """As the course API answers it (with what it counts), and what a learner's client shows."""
    shown = shown_result(submission)
    place = (submission.course_id or "", submission.exercise_id)
    return LearnerSubmissionOut.model_validate(
        {
            **submission_out(submission, counted).model_dump(),
            "course": submission.course_id,
            "diagnosis_text": diagnosis_name(submission.diagnosis)
            if submission.diagnosis
            else None,
            "by_token": submission.personal_token_id is not None,
            "page_url": f"/submissions/{submission.id}",
            "events_url": f"/api/v1/me/submissions/{submission.id}/events",
            "notices": shown.notices,
            "charts_svg": [str(Markup(line_chart(plot))) for plot in shown.plots],
            "solution": solutions.get(place),
        }
    )


@router.get(
    "/submissions/{submission_id}", response_model=LearnerSubmissionOut, responses=_not_found
)
def read_my_submission(submission_id: str, session: SessionDep, holder: TokenHolderDep) -> Response:
    """Your submission: its status and, once graded, its result, as its page shows it."""
    submission = _my_submission(session, holder, submission_id)
    return answered(
        _learner_submission_out(
            submission, standing_of(session, submission), _released_solutions(session, holder)
        )
    )


@router.get("/submissions", response_model=list[LearnerSubmissionOut], responses=_token_errors)
def list_my_submissions(
    session: SessionDep,
    holder: TokenHolderDep,
    exercise: Annotated[str | None, Query(description="Only this exercise's.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[LearnerSubmissionOut]:
    """Your submissions, in every course and in practice, newest first."""
    query = select(Submission).where(Submission.user_id == holder.user.id)
    if exercise is not None:
        query = query.where(Submission.exercise_id == exercise)
    rows = list(session.scalars(query.order_by(Submission.created_at.desc()).limit(limit)))
    counted, solutions = standings_of(session, rows), _released_solutions(session, holder)
    return [_learner_submission_out(row, counted[row.id], solutions) for row in rows]


@router.get(
    "/submissions/{submission_id}/events",
    response_class=StreamingResponse,
    responses={
        **_not_found,
        200: {"content": {"text/event-stream": {}}, "description": "queued, running, done."},
        503: {"model": ErrorOut, "description": "Too many streams; see `Retry-After`."},
    },
)
def follow_my_submission(
    request: Request, submission_id: str, session: SessionDep, holder: TokenHolderDep
) -> StreamingResponse:
    """Your submission's progress as server-sent events, as the page's stream: `queued`,
    `running`, `heartbeat`, then `done` with its status and address; read the result there."""
    _my_submission(session, holder, submission_id)
    return progress_stream_response(request, submission_id, _read_done)


def _read_done(sessions: SessionFactory, submission_id: str) -> dict[str, Any]:
    """What the API's stream says with `done`: the status, and where the result is read."""
    with sessions() as session:
        status = session.scalar(select(Submission.status).where(Submission.id == submission_id))
    return {"status": status, "url": f"/api/v1/me/submissions/{submission_id}"}


@router.get(
    "/exercises/{exercise_id}/practice-kit",
    response_model=PracticeKitOut,
    responses={**_token_errors, 404: {"model": ErrorOut, "description": "No such exercise."}},
)
def read_practice_kit(exercise_id: str, holder: TokenHolderDep) -> Response:
    """Which harness, the exercise's visible cases and the reference's records on them, for
    checking locally with the client's own harness. Hidden cases never leave the server: only
    the server grades."""
    try:
        # The holder's own cases: what the server grades their submissions on.
        exercise = for_learner(get_exercise(exercise_id), user_learner_key(holder.user.id))
    except UnknownExercise:
        raise HTTPException(404, detail=f"no exercise {exercise_id[:100]!r}") from None
    visible = [case for case in exercise.cases if not case.hidden]
    reference = trusted_trajectories(exercise)["reference"]
    return answered(
        PracticeKitOut(
            exercise=exercise.id,
            version=exercise.version,
            kind=exercise.kind,
            entry_point=exercise.entry_point,
            harness_sha256=HARNESS_SHA256,
            cases=[case.harness_spec() for case in visible],
            reference={case.id: reference[case.id].model_dump() for case in visible},
        )
    )


@router.post(
    "/exercises/{exercise_id}/practice-check",
    response_model=PracticeCheckOut,
    responses={
        **_token_errors,
        404: {"model": ErrorOut, "description": "No such exercise."},
        422: {"model": ErrorOut, "description": "Not a trace."},
    },
)
def check_practice_trace(
    exercise_id: str, body: PracticeTraceIn, holder: TokenHolderDep
) -> Response:
    """The server's diagnosis and words for what your code recorded on the visible cases, run
    on your computer by `loopgrade-client check`: the same judging as a grading's, on those
    cases alone. Not a grade (the hidden cases decide one); nothing is stored."""
    try:
        exercise = for_learner(get_exercise(exercise_id), user_learner_key(holder.user.id))
    except UnknownExercise:
        raise HTTPException(404, detail=f"no exercise {exercise_id[:100]!r}") from None
    report = judge_visible_trace(exercise, json.dumps(body.trace).encode())
    return answered(
        PracticeCheckOut(
            exercise=exercise.id,
            diagnosis=report.diagnosis,
            diagnosis_text=diagnosis_name(report.diagnosis),
            checks=[
                PracticeCheckResultOut(id=check.id, passed=check.passed, message=check.message)
                for check in report.checks
            ],
            feedback=report.feedback,
        )
    )
