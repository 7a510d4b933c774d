"""A learner's code is never lost: drafts, the code an exercise page opens on, and code kept
across a session that ended.

A signed-in learner's draft is the code in their editor for one exercise (in a course, or in
practice), saved as they type and when they submit. The exercise page opens on the newest of
the learner's code: the draft, else their latest submission, else the starter. Code submitted
from a page whose session had ended is kept for the browser that sent it (a cookie holds the
token) until it signs in and the page shows it again.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.grading.submissions import SubmissionRejected, check_code
from app.models import Draft, KeptSubmission, utc_now
from app.submission_history import submissions_of
from graders.exercise import Exercise

# Long enough to find a password and sign in again; the browser's own copy outlives it.
KEPT_SUBMISSION_SECONDS = 24 * 3600
# Kept code belongs to no account yet: one client address cannot fill the database with it,
# nor can all of them (at most MAX_KEPT_IN_TOTAL times max_code_bytes, 64 MiB by default).
MAX_KEPT_PER_ADDRESS = 20
MAX_KEPT_IN_TOTAL = 1000


class TooManyKept(SubmissionRejected):
    """This address already has as many kept submissions as it may."""


def find_draft(
    session: Session, *, user_id: str, course_id: str | None, exercise_id: str
) -> Draft | None:
    return session.scalars(
        select(Draft).where(
            Draft.user_id == user_id,
            Draft.course_id.is_(None) if course_id is None else Draft.course_id == course_id,
            Draft.exercise_id == exercise_id,
        )
    ).one_or_none()


def save_draft(
    session: Session,
    *,
    user_id: str,
    course_id: str | None,
    exercise_id: str,
    code: str,
    max_code_bytes: int,
) -> Draft:
    """Replace the learner's draft (SubmissionRejected when the code is too large or not text)."""
    check_code(code, max_code_bytes)
    draft = find_draft(session, user_id=user_id, course_id=course_id, exercise_id=exercise_id)
    if draft is None:
        draft = Draft(user_id=user_id, course_id=course_id, exercise_id=exercise_id, code=code)
        try:
            # Two tabs saving the first draft at once: the second updates the first's row.
            with session.begin_nested():
                session.add(draft)
        except IntegrityError:
            draft = find_draft(
                session, user_id=user_id, course_id=course_id, exercise_id=exercise_id
            )
            if draft is None:
                raise
    draft.code = code
    draft.updated_at = utc_now()
    session.flush()
    return draft


@dataclass(frozen=True)
class OpeningCode:
    """The code an exercise page opens on, and when the server saved it (None: the starter)."""

    code: str
    saved_at: datetime | None


def opening_code(
    session: Session,
    *,
    user_id: str | None,
    anonymous_learner: str | None,
    course_id: str | None,
    exercise: Exercise,
) -> OpeningCode:
    """The learner's latest code: their draft, else their latest submission, else the starter."""
    if user_id is not None:
        draft = find_draft(session, user_id=user_id, course_id=course_id, exercise_id=exercise.id)
        if draft is not None:
            return OpeningCode(draft.code, draft.updated_at)
    latest = submissions_of(
        session,
        user_id=user_id,
        anonymous_learner=anonymous_learner,
        course_id=course_id,
        exercise_id=exercise.id,
        limit=1,
    )
    if latest:
        return OpeningCode(latest[0].code, latest[0].created_at)
    return OpeningCode(exercise.starter_code, None)


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def keep_submission(
    session: Session, *, page_path: str, code: str, max_code_bytes: int, client_address: str
) -> str:
    """Keep code sent to `page_path` by a browser whose session had ended; returns the token
    its cookie carries. SubmissionRejected when the code could not have been submitted, or
    (TooManyKept) when `client_address` has MAX_KEPT_PER_ADDRESS kept already, or all
    addresses MAX_KEPT_IN_TOTAL."""
    check_code(code, max_code_bytes)
    now = utc_now()
    session.execute(delete(KeptSubmission).where(KeptSubmission.expires_at < now))
    kept_here = session.scalar(
        select(func.count())
        .select_from(KeptSubmission)
        .where(KeptSubmission.client_address == client_address)
    )
    if (kept_here or 0) >= MAX_KEPT_PER_ADDRESS:
        raise TooManyKept(f"{kept_here} submissions from your address are kept already")
    kept = session.scalar(select(func.count()).select_from(KeptSubmission))
    if (kept or 0) >= MAX_KEPT_IN_TOTAL:
        raise TooManyKept(f"{kept} submissions are kept already")
    token = secrets.token_urlsafe(32)
    session.add(
        KeptSubmission(
            token_hash=_token_hash(token),
            page_path=page_path[:300],
            code=code,
            client_address=client_address,
            expires_at=now + timedelta(seconds=KEPT_SUBMISSION_SECONDS),
        )
    )
    session.flush()
    return token


def find_kept_submission(session: Session, *, token: str, page_path: str) -> KeptSubmission | None:
    """The code this browser sent to `page_path` while signed out, unless it expired."""
    kept = session.get(KeptSubmission, _token_hash(token))
    if kept is None or kept.page_path != page_path or kept.expires_at < utc_now():
        return None
    return kept


def discard_kept_submission(session: Session, *, token: str) -> None:
    session.execute(delete(KeptSubmission).where(KeptSubmission.token_hash == _token_hash(token)))
    session.flush()
