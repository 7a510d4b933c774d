"""REST API, `/api/v1`: submit code, read results, list exercises."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status

from app.auth import ApiKeyDep
from app.db import SessionDep
from app.models import Submission, SubmissionStatus
from app.queue import DispatcherDep
from app.schemas import ErrorOut, ExerciseOut, SubmissionAccepted, SubmissionCreate, SubmissionOut
from app.settings import SettingsDep
from app.submissions import CodeTooLarge, SubmissionRejected, create_submission, get_submission
from graders.exercises import list_exercises

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
    try:
        submission = create_submission(
            session,
            exercise_id=body.exercise,
            learner=body.learner,
            code=body.code,
            max_code_bytes=settings.max_code_bytes,
            api_key_id=api_key.id,
        )
    except SubmissionRejected as exc:
        code = 413 if isinstance(exc, CodeTooLarge) else 422
        raise HTTPException(code, detail=str(exc)) from None
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
