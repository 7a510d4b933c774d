"""An instructor's score for a submission, with a reason; it counts until it is removed.

Setting or removing one changes the learner's counted score: the LMS is sent it
(app/reactions.py)."""

from __future__ import annotations

import math

from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.errors import AppError
from app.models import Submission, User, utc_now
from app.outbox import ScoreChange, report_score_change

MAX_REASON_CHARS = 2000


class OverrideRejected(AppError, ValueError):
    """The override cannot be set; the message says why."""

    status_code = 422
    title = "Not changed"


def set_override(
    session: Session, submission: Submission, *, score: float, reason: str, by: User
) -> None:
    """Count `score` for this submission instead of its graded one; logged with the reason."""
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
    )
    submission.override_score = score
    submission.override_reason = reason
    submission.override_by_id = by.id
    submission.override_at = utc_now()
    session.flush()
    report_score_change(session, ScoreChange.OVERRIDDEN, submission.id)


def remove_override(session: Session, submission: Submission, *, by: User) -> None:
    """The graded score counts again."""
    if submission.override_score is None:
        raise OverrideRejected("this submission has no override to remove")
    record_event(
        session,
        actor=by,
        action=AuditAction.OVERRIDE_REMOVED,
        course_id=submission.course_id,
        submission_id=submission.id,
        previous_override=submission.override_score,
        graded_score=submission.score,
    )
    submission.override_score = None
    submission.override_reason = None
    submission.override_by_id = None
    submission.override_at = None
    session.flush()
    report_score_change(session, ScoreChange.OVERRIDDEN, submission.id)
