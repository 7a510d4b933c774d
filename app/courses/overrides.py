"""An instructor's score for a submission, with a reason; it counts until it is removed.

It replaces that submission's score in the counted-score rule (app/courses/counted.py): an
override of an older attempt never lowers a better one. What it does to the learner's counted
score is shown before it is saved and kept in the audit log; the LMS is sent the counted score
(app/reactions.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.courses.gradebook import assigned_exercise_of, counted_cell
from app.errors import AppError
from app.models import ScoringPolicy, Submission, User, utc_now
from app.outbox import ScoreChange, report_score_change

MAX_REASON_CHARS = 2000


class OverrideRejected(AppError, ValueError):
    """The override cannot be set; the message says why."""

    status_code = 422
    title = "Not changed"


@dataclass(frozen=True)
class CountedChange:
    """The learner's counted score for the exercise before and after an override change."""

    before: float | None
    after: float | None
    # The attempt that counts after it when not the overridden one: "a better attempt".
    other_attempt: str | None

    @property
    def changes(self) -> bool:
        return self.before != self.after

    @property
    def sentence(self) -> str:
        """What the instructor is told before saving."""
        if self.changes:
            return (
                f"This changes the counted score from {_number(self.before)} "
                f"to {_number(self.after)}."
            )
        if self.other_attempt:
            return (
                f"This does not change the counted score: {self.other_attempt} counts "
                f"({_number(self.after)})."
            )
        return f"This does not change the counted score ({_number(self.after)})."


def _number(value: float | None) -> str:
    return "nothing" if value is None else f"{value:g}"


def counted_change(
    session: Session, submission: Submission, override: float | None
) -> CountedChange:
    """What setting (`override`) or removing (None) this submission's override would do to
    the learner's counted score."""
    before = counted_cell(session, submission)
    after = counted_cell(session, submission, {submission.id: override})
    other = after is not None and after.counted_submission_id not in (None, submission.id)
    latest = (
        after is not None
        and (assigned := assigned_exercise_of(session, submission)) is not None
        and assigned.assignment.scoring_policy == ScoringPolicy.LATEST
    )
    return CountedChange(
        before=before.score if before else None,
        after=after.score if after else None,
        other_attempt=("a later attempt" if latest else "a better attempt") if other else None,
    )


def check_override(submission: Submission, *, score: float, reason: str) -> str:
    """The reason, stripped; OverrideRejected says what is wrong with the score or reason."""
    reason = reason.strip()
    if not reason:
        raise OverrideRejected("say why: the reason is kept in the audit log")
    if len(reason) > MAX_REASON_CHARS:
        raise OverrideRejected(f"the reason may have at most {MAX_REASON_CHARS} characters")
    max_score = submission.max_score
    if max_score is None:
        raise OverrideRejected("this submission has no graded result to override yet")
    if not math.isfinite(score) or not 0 <= score <= max_score:
        raise OverrideRejected(f"the score must be between 0 and {max_score:g}")
    return reason


def set_override(
    session: Session, submission: Submission, *, score: float, reason: str, by: User
) -> CountedChange:
    """Count `score` for this submission instead of its graded one; logged with the reason
    and what it did to the counted score."""
    reason = check_override(submission, score=score, reason=reason)
    change = counted_change(session, submission, score)
    record_event(
        session,
        actor=by,
        action=AuditAction.OVERRIDE_SET,
        course_id=submission.course_id,
        submission_id=submission.id,
        score=score,
        previous_override=submission.override_score,
        graded_score=submission.score,
        reason=reason,
        counted_before=change.before,
        counted_after=change.after,
    )
    submission.override_score = score
    submission.override_reason = reason
    submission.override_by_id = by.id
    submission.override_at = utc_now()
    session.flush()
    report_score_change(session, ScoreChange.OVERRIDDEN, submission.id)
    return change


def remove_override(session: Session, submission: Submission, *, by: User) -> CountedChange:
    """The graded score counts again."""
    if submission.override_score is None:
        raise OverrideRejected("this submission has no override to remove")
    change = counted_change(session, submission, None)
    record_event(
        session,
        actor=by,
        action=AuditAction.OVERRIDE_REMOVED,
        course_id=submission.course_id,
        submission_id=submission.id,
        previous_override=submission.override_score,
        graded_score=submission.score,
        counted_before=change.before,
        counted_after=change.after,
    )
    submission.override_score = None
    submission.override_reason = None
    submission.override_by_id = None
    submission.override_at = None
    session.flush()
    report_score_change(session, ScoreChange.OVERRIDDEN, submission.id)
    return change
