"""REST API, `/api/v1`: submit code, read results, list exercises."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Response, UploadFile, status
from sqlalchemy.orm import Session

from app.auth import ApiKeyDep
from app.db import SessionDep
from app.models import Submission, SubmissionStatus
from app.queue import Dispatcher, DispatcherDep
from app.schemas import ErrorOut, ExerciseOut, SubmissionAccepted, SubmissionCreate, SubmissionOut
from app.settings import Settings, SettingsDep
from app.submissions import CodeTooLarge, SubmissionRejected, create_submission, get_submission
from graders.exercises import list_exercises
from graders.notebook import NotebookError, code_from_file

router = APIRouter(prefix="/api/v1", tags=["api"])

_auth_errors: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorOut, "description": "No API key, or a wrong or revoked one."}
}


def submission_out(submission: Submission) -> SubmissionOut:
    return SubmissionOut.model_validate(
        {
            "id": submission.id,
            "exercise": submission.exercise_id,
            "learner": submission.learner,
            "status": submission.status,
            "score": submission.score,
            "max_score": submission.max_score,
            "diagnosis": submission.diagnosis,
            "checks": submission.checks or [],
            "feedback": submission.feedback,
            "created_at": submission.created_at,
            "graded_at": submission.graded_at,
        }
    )


@router.post(
    "/submissions",
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        **_auth_errors,
        413: {"model": ErrorOut, "description": "The code is over the size limit."},
        422: {"model": ErrorOut, "description": "Unknown exercise, or a malformed body."},
    },
)
def submit(
    body: SubmissionCreate,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    api_key: ApiKeyDep,
    dispatcher: DispatcherDep,
) -> SubmissionAccepted:
    """Queue code for grading. Answers once it is stored; the result is at `Location`."""
    return _accept(
        session, settings, dispatcher, response, api_key.id, body.exercise, body.learner, body.code
    )


@router.post(
    "/submissions/upload",
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        **_auth_errors,
        413: {"model": ErrorOut, "description": "The file or its code is over the size limit."},
        422: {"model": ErrorOut, "description": "Unknown exercise, or an unusable file."},
    },
)
def submit_file(
    exercise: Annotated[str, Form(description="Exercise id.")],
    learner: Annotated[str, Form(description="The learner's id in your system.")],
    file: Annotated[UploadFile, Form(description="A .py file or a .ipynb notebook.")],
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    api_key: ApiKeyDep,
    dispatcher: DispatcherDep,
) -> SubmissionAccepted:
    """Queue an uploaded `.py` or `.ipynb` for grading (multipart/form-data).

    A notebook's code cells are joined; IPython magics and shell lines are left out, each
    named in `notices`.
    """
    data = file.file.read(settings.max_upload_bytes + 1)
    if len(data) > settings.max_upload_bytes:
        raise HTTPException(
            413, detail=f"the file is over the upload limit of {settings.max_upload_bytes} bytes"
        )
    try:
        extracted = code_from_file(file.filename or "", data)
    except NotebookError as exc:
        raise HTTPException(422, detail=str(exc)) from None
    accepted = _accept(
        session, settings, dispatcher, response, api_key.id, exercise, learner, extracted.source
    )
    return accepted.model_copy(update={"notices": extracted.notices})


def _accept(
    session: Session,
    settings: Settings,
    dispatcher: Dispatcher,
    response: Response,
    api_key_id: str,
    exercise: str,
    learner: str,
    code: str,
) -> SubmissionAccepted:
    try:
        submission = create_submission(
            session,
            exercise_id=exercise,
            learner=learner,
            code=code,
            max_code_bytes=settings.max_code_bytes,
            api_key_id=api_key_id,
        )
    except SubmissionRejected as exc:
        code_status = 413 if isinstance(exc, CodeTooLarge) else 422
        raise HTTPException(code_status, detail=str(exc)) from None
    session.commit()
    dispatcher.enqueue(submission.id)
    response.headers["Location"] = f"/api/v1/submissions/{submission.id}"
    return SubmissionAccepted(id=submission.id, status=SubmissionStatus(submission.status))


@router.get(
    "/submissions/{submission_id}",
    responses={**_auth_errors, 404: {"model": ErrorOut, "description": "No such submission."}},
)
def read_submission(submission_id: str, session: SessionDep, _api_key: ApiKeyDep) -> SubmissionOut:
    """A submission's status and, once graded, its score, diagnosis, checks and feedback."""
    submission = get_submission(session, submission_id)
    if submission is None:
        raise HTTPException(404, detail=f"no submission with id {submission_id!r}")
    return submission_out(submission)


@router.get("/exercises")
def read_exercises() -> list[ExerciseOut]:
    """Every exercise a submission can name."""
    return [
        ExerciseOut(
            id=exercise.id,
            title=exercise.title,
            signature=exercise.signature,
            max_score=exercise.max_score,
            version=exercise.version,
        )
        for exercise in list_exercises()
    ]
