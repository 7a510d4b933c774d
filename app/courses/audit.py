"""The audit log: who changed a score or a course, when, and the values before and after."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import AuditEvent, User


def record_event(
    session: Session,
    *,
    actor: User | None,
    action: str,
    course_id: str | None = None,
    submission_id: str | None = None,
    **details: Any,
) -> AuditEvent:
    event = AuditEvent(
        actor_id=actor.id if actor else None,
        action=action,
        course_id=course_id,
        submission_id=submission_id,
        details=details,
    )
    session.add(event)
    session.flush()
    return event


def events(
    session: Session,
    *,
    course_id: str | None = None,
    submission_id: str | None = None,
    limit: int = 200,
) -> list[tuple[AuditEvent, User | None]]:
    """Newest first, with the person who acted."""
    query = select(AuditEvent, User).outerjoin(User, User.id == AuditEvent.actor_id)
    if course_id is not None:
        query = query.where(AuditEvent.course_id == course_id)
    if submission_id is not None:
        query = query.where(AuditEvent.submission_id == submission_id)
    rows = session.execute(query.order_by(AuditEvent.id.desc()).limit(limit)).all()
    return [(event, user) for event, user in rows]
