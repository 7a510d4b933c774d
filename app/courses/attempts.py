"""Each learner's graded attempts at one exercise of a course, oldest first: what the
misconception map and the item analysis read.

A learner is an enrolled learner (by account) or a learner an API key named in the course.
Submissions still grading are not attempts yet, and neither is the untouched starter code
(app/courses/counted.py's `is_started`: it says nothing about what a learner thinks).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.courses.counted import is_solved, is_started
from app.courses.membership import members
from app.models import CourseRole, ExerciseOpen, Submission, SubmissionStatus


@dataclass(frozen=True)
class Attempt:
    submission_id: str
    diagnosis: str
    score: float
    max_score: float
    at: datetime
    solved: bool
    checks: tuple[tuple[str, bool], ...] = ()  # (check id, passed), in the report's order

    @property
    def percent(self) -> float:
        return 100 * self.score / self.max_score if self.max_score else 0.0


@dataclass(frozen=True)
class LearnerAttempts:
    key: str  # the account's id, or "api:<learner>" for a learner named by an API key
    name: str
    email: str  # "" for a learner named by an API key
    attempts: list[Attempt]  # oldest first; never empty
    opened_at: datetime | None  # first open of the exercise's page, when it was recorded

    @property
    def first_solve(self) -> Attempt | None:
        return next((a for a in self.attempts if a.solved), None)


def _attempt(submission: Submission) -> Attempt:
    return Attempt(
        submission_id=submission.id,
        diagnosis=submission.diagnosis or "unknown",
        score=submission.score or 0.0,
        max_score=submission.max_score or 0.0,
        at=submission.created_at,
        solved=is_solved(submission),
        checks=tuple(
            (str(check["id"]), bool(check.get("passed")))
            for check in submission.checks or []
            if isinstance(check, dict) and "id" in check
        ),
    )


def learner_attempts(session: Session, course_id: str, exercise_id: str) -> list[LearnerAttempts]:
    """The learners who made at least one attempt, by name."""
    learners = {user.id: user for user in members(session, course_id, CourseRole.LEARNER)}
    opened = {
        user_id: at
        for user_id, at in session.execute(
            select(ExerciseOpen.user_id, ExerciseOpen.opened_at).where(
                ExerciseOpen.course_id == course_id, ExerciseOpen.exercise_id == exercise_id
            )
        )
    }
    by_key: dict[str, list[Attempt]] = {}
    names: dict[str, tuple[str, str]] = {}
    for submission in session.scalars(
        select(Submission)
        .where(
            Submission.course_id == course_id,
            Submission.exercise_id == exercise_id,
            Submission.status == SubmissionStatus.GRADED,
        )
        .order_by(Submission.created_at, Submission.id)
    ):
        if not is_started(submission):
            continue
        if submission.user_id is not None:
            user = learners.get(submission.user_id)
            if user is None:  # an instructor's own try, or someone who left the course
                continue
            key, names[key] = user.id, (user.name, user.email)
        else:
            key = f"api:{submission.learner}"
            names[key] = (submission.learner, "")
        by_key.setdefault(key, []).append(_attempt(submission))
    return sorted(
        (
            LearnerAttempts(key, *names[key], attempts, opened.get(key))
            for key, attempts in by_key.items()
        ),
        key=lambda learner: (learner.name.casefold(), learner.email, learner.key),
    )


def note_first_open(session: Session, *, course_id: str, exercise_id: str, user_id: str) -> None:
    """Record when a learner first opens a course's exercise (once; later opens change nothing)."""
    recorded = select(ExerciseOpen.id).where(
        ExerciseOpen.course_id == course_id,
        ExerciseOpen.exercise_id == exercise_id,
        ExerciseOpen.user_id == user_id,
    )
    if session.scalar(recorded) is not None:
        return
    try:
        # A second tab opening it at the same moment inserts the same row: theirs stands.
        with session.begin_nested():
            session.add(ExerciseOpen(course_id=course_id, exercise_id=exercise_id, user_id=user_id))
    except IntegrityError:
        pass
