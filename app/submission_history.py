"""One learner's submissions, newest first: a user's or an anonymous browser's, in a course, in
practice or everywhere. Below the domains that read them (the gradebook's standings, the drafts'
latest code) so that `app/courses` need not import `app/grading`, which imports it."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Submission


def submissions_of(
    session: Session,
    *,
    user_id: str | None = None,
    anonymous_learner: str | None = None,
    course_id: str | None = None,
    any_course: bool = False,
    exercise_id: str | None = None,
    limit: int = 500,
) -> list[Submission]:
    """One learner's submissions, newest first: a user's, or an anonymous browser's practice.

    `course_id` None means practice (no course) unless `any_course`.
    """
    query = select(Submission)
    if user_id is not None:
        query = query.where(Submission.user_id == user_id)
    elif anonymous_learner is not None:
        query = query.where(
            Submission.user_id.is_(None),
            Submission.api_key_id.is_(None),
            Submission.learner == anonymous_learner,
        )
    else:
        return []
    if not any_course:
        query = query.where(
            Submission.course_id.is_(None)
            if course_id is None
            else Submission.course_id == course_id
        )
    if exercise_id is not None:
        query = query.where(Submission.exercise_id == exercise_id)
    return list(session.scalars(query.order_by(Submission.created_at.desc()).limit(limit)))
