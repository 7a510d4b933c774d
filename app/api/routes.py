"""REST API, `/api/v1`: submit code, read results, the course's gradebook, list exercises.

A key tied to a course submits into that course (its assignments' due dates, locks and the
per-learner rate limit apply) and reads only that course's submissions and gradebook. A key
from before courses (none) reads only submissions made without a course.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Header, HTTPException, Query, Response, UploadFile, status
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from app.api.schemas import (
    ErrorOut,
    ExerciseOut,
    SubmissionAccepted,
    SubmissionCreate,
    SubmissionOut,
)
from app.api_keys import ApiKeyDep
from app.courses.counted import Standing
from app.courses.gradebook import (
    FILTERS,
    build_gradebook,
    gradebook_json,
    standing_of,
    standings_of,
)
from app.courses.hints import first_hint, hint_count, rules_for
from app.courses.membership import NotFound, assignment_of, assignments_of
from app.db import SessionDep
from app.grading.intake import Accepted, Idempotency, Upload, accept_submission
from app.grading.results import shown_result
from app.grading.submissions import SubmissionRejected, get_submission
from app.models import ApiKey, Course, Submission, SubmissionStatus
from app.settings import Settings, SettingsDep
from graders.exercises import list_exercises

router = APIRouter(prefix="/api/v1", tags=["api"])

_auth_errors: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorOut, "description": "No API key, or a wrong or revoked one."}
}
_submit_errors: dict[int | str, dict[str, object]] = {
    **_auth_errors,
    403: {
        "model": ErrorOut,
        "description": "Closed for this learner: locked after their due date, their attempts "
        "used up, or their time for a timed exercise run out (`detail` says which).",
    },
    429: {
        "model": ErrorOut,
        "description": "The learner reached the submission rate limit; see `Retry-After`.",
    },
}


def answered(
    model: BaseModel, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """`model` as the JSON answer, sent as it is.

    FastAPI validates what a sync route returns once more, on another worker thread: for the
    routes every grading goes through, a second thread hop (about 0.1 ms of CPU) for a model
    the route has just built. Their decorators name the model (`response_model`) for the docs.
    """
    return Response(
        model.model_dump_json(),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )


def _hint_fields(submission: Submission) -> dict[str, object]:
    """The result's hint count under its course's settings, and its first hint only."""
    if submission.status != SubmissionStatus.GRADED:
        return {}
    session = object_session(submission)
    if session is None:
        return {}
    course = session.get(Course, submission.course_id) if submission.course_id else None
    rules = rules_for(session, submission, course)
    return {
        "hint_count": hint_count(rules, submission.exercise_id, submission.diagnosis),
        "first_hint": first_hint(submission.exercise_id, submission.diagnosis),
    }


def submission_out(
    submission: Submission, counted: tuple[Standing | None, str | None]
) -> SubmissionOut:
    """The submission as the API answers it; `counted` is what it counts (standings_of)."""
    shown = shown_result(submission)
    standing, counted_because = counted
    return SubmissionOut.model_validate(
        {
            "id": submission.id,
            "exercise": submission.exercise_id,
            "learner": submission.learner,
            "status": submission.status,
            "score": submission.score,
            "max_score": submission.max_score,
            "counted_score": standing.value if standing else None,
            "counted_as": standing.counted_as if standing else None,
            "counted_because": counted_because,
            "diagnosis": submission.diagnosis,
            "checks": [check.model_dump() for check in shown.checks],
            "feedback": shown.feedback,
            **_hint_fields(submission),
            "created_at": submission.created_at,
            "graded_at": submission.graded_at,
        }
    )


IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Any unique string (a UUID): a retry with the same key and body gets the "
        "same submission, not a second one.",
    ),
]


@router.post(
    "/submissions",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionAccepted,
    responses={
        **_submit_errors,
        413: {"model": ErrorOut, "description": "The code is over the size limit."},
        422: {
            "model": ErrorOut,
            "description": "Unknown exercise, a malformed body, code that does not compile "
            "(`line` says where; nothing is stored or counted), or an Idempotency-Key reused "
            "with another body.",
        },
    },
)
def submit(
    body: SubmissionCreate,
    session: SessionDep,
    settings: SettingsDep,
    api_key: ApiKeyDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Queue code for grading. Answers once it is stored; the result is at `Location`."""
    accepted = _accept(
        session,
        settings,
        api_key,
        idempotency_key,
        exercise_id=body.exercise,
        learner=body.learner,
        code=body.code,
    )
    return accepted_answer(accepted, f"{router.prefix}/submissions")


@router.post(
    "/submissions/upload",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionAccepted,
    responses={
        **_submit_errors,
        413: {"model": ErrorOut, "description": "The file or its code is over the size limit."},
        422: {
            "model": ErrorOut,
            "description": "Unknown exercise, an unusable file, code that does not compile "
            "(`line` says where; nothing is stored or counted), or an Idempotency-Key reused "
            "with another file.",
        },
    },
)
def submit_file(
    exercise: Annotated[str, Form(description="Exercise id.")],
    learner: Annotated[str, Form(description="The learner's id in your system.")],
    file: Annotated[UploadFile, Form(description="A .py file or a .ipynb notebook.")],
    session: SessionDep,
    settings: SettingsDep,
    api_key: ApiKeyDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Queue an uploaded `.py` or `.ipynb` for grading (multipart/form-data).

    A notebook's code cells are joined; IPython magics and shell lines are left out, each
    named in `notices`.
    """
    accepted = _accept(
        session,
        settings,
        api_key,
        idempotency_key,
        exercise_id=exercise,
        learner=learner,
        upload=Upload(file.filename or "", file.file),
    )
    return accepted_answer(accepted, f"{router.prefix}/submissions")


def _accept(
    session: Session,
    settings: Settings,
    api_key: ApiKey,
    idempotency_key: str | None,
    *,
    exercise_id: str,
    learner: str,
    code: str = "",
    upload: Upload | None = None,
) -> Accepted:
    assigned = None
    if api_key.course_id is not None:
        try:
            assigned = assignment_of(session, api_key.course_id, exercise_id)
        except NotFound:
            known = ", ".join(a.id for a in assignments_of(session, api_key.course_id))
            raise SubmissionRejected(
                f"exercise {exercise_id[:100]!r} is not set in this key's course; "
                f"set: {known or 'none'}"
            ) from None
    return accept_submission(
        session,
        settings,
        exercise_id=exercise_id,
        learner=learner,
        code=code,
        upload=upload,
        api_key_id=api_key.id,
        course_id=api_key.course_id,
        assigned=assigned,
        idempotency=Idempotency.from_header(f"api-key:{api_key.id}", idempotency_key),
    )


def accepted_answer(accepted: Accepted, submissions_path: str) -> Response:
    """202 with the submission's id, status and notices, and its URL (under
    `submissions_path`) in `Location`."""
    submission = accepted.submission
    headers = {"Location": f"{submissions_path}/{submission.id}"}
    if accepted.replayed:
        headers["Idempotent-Replayed"] = "true"
    body = SubmissionAccepted(
        id=submission.id, status=SubmissionStatus(submission.status), notices=accepted.notices
    )
    return answered(body, status.HTTP_202_ACCEPTED, headers)


@router.get(
    "/submissions/{submission_id}",
    response_model=SubmissionOut,
    responses={**_auth_errors, 404: {"model": ErrorOut, "description": "No such submission."}},
)
def read_submission(submission_id: str, session: SessionDep, api_key: ApiKeyDep) -> Response:
    """A submission's status and, once graded, its score, diagnosis, checks and feedback."""
    submission = get_submission(session, submission_id)
    # Another course's submission is answered exactly like a missing one.
    if submission is None or not _key_sees(api_key, submission):
        raise HTTPException(404, detail=f"no submission with id {submission_id!r}")
    return answered(submission_out(submission, standing_of(session, submission)))


def _key_sees(api_key: ApiKey, submission: Submission) -> bool:
    """A course's key: that course's submissions. A key of no course: submissions made over the
    API outside any course (a learner's practice on the pages stays theirs)."""
    if api_key.course_id is not None:
        return submission.course_id == api_key.course_id
    return submission.course_id is None and submission.api_key_id is not None


@router.get(
    "/submissions",
    responses={**_auth_errors},
)
def list_submissions(
    session: SessionDep,
    api_key: ApiKeyDep,
    learner: Annotated[str | None, Query(description="Only this learner's.")] = None,
    exercise: Annotated[str | None, Query(description="Only this exercise's.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[SubmissionOut]:
    """The key's course's submissions (for a key of no course: those made over the API outside
    any course), newest first."""
    if api_key.course_id is not None:
        query = select(Submission).where(Submission.course_id == api_key.course_id)
    else:
        query = select(Submission).where(
            Submission.course_id.is_(None), Submission.api_key_id.is_not(None)
        )
    if learner is not None:
        query = query.where(Submission.learner == learner)
    if exercise is not None:
        query = query.where(Submission.exercise_id == exercise)
    rows = list(session.scalars(query.order_by(Submission.created_at.desc()).limit(limit)))
    counted = standings_of(session, rows)
    return [submission_out(row, counted[row.id]) for row in rows]


@router.get(
    "/gradebook",
    responses={
        **_auth_errors,
        403: {"model": ErrorOut, "description": "The key is not tied to a course."},
    },
)
def read_gradebook(
    session: SessionDep,
    api_key: ApiKeyDep,
    q: Annotated[str, Query(description="Only learners whose name or email contains this.")] = "",
    only: Annotated[str, Query(description=f"One of: {', '.join(FILTERS)}.")] = "all",
    exercise: Annotated[str, Query(description="Only this exercise's column.")] = "",
    sort: Annotated[str, Query(description="name, email, total or an exercise id.")] = "name",
    order: Annotated[str, Query(description="asc or desc.")] = "asc",
) -> dict[str, Any]:
    """The key's course's gradebook: the same rows, columns and scores as the instructor's page
    and its CSV with the same query, each cell with its details."""
    if api_key.course_id is None:
        raise HTTPException(
            403,
            detail="this key is not tied to a course: create one with "
            "'loopgrade keys create NAME --course COURSE'",
        )
    course = session.get(Course, api_key.course_id)
    if course is None:
        raise HTTPException(404, detail="this key's course no longer exists")
    book = build_gradebook(
        session, course, q=q, only=only, exercise=exercise, sort=sort, order=order
    )
    return gradebook_json(book)


@router.get("/exercises")
def read_exercises() -> list[ExerciseOut]:
    """Every exercise a submission can name, unit by unit in their order."""
    return [
        ExerciseOut(
            id=exercise.id,
            title=exercise.title,
            unit=exercise.unit,
            signature=exercise.signature,
            max_score=exercise.max_score,
            version=exercise.version,
        )
        for exercise in list_exercises()
    ]
