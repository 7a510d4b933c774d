"""The audit log: who changed a score or a course, when, and the values before and after."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from app.models import AuditEvent, RegradeReason, Submission, User
from graders.exercises import UnknownExercise, get_exercise


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


@dataclass(frozen=True)
class AuditEntry:
    """One event with the people it names: who acted, and whose submission it was about."""

    event: AuditEvent
    actor: User | None
    submission: Submission | None
    learner: User | None

    @property
    def sentence(self) -> str:
        """The event as a sentence: "Tess Teacher overrode Lee Learner's One training step
        score 4 → 7: “explained in the lab”."."""
        details = self.event.details or {}
        who = self.actor.name if self.actor else "The system"
        exercise = _title(
            self.submission.exercise_id if self.submission else details.get("exercise")
        )
        whose = f"{self._learner_name()}'s {exercise}"
        action = self.event.action
        if action == "override.set":
            before = details.get("previous_override")
            before = details.get("graded_score") if before is None else before
            text = (
                f"{who} overrode {whose} score {_number(before)} → {_number(details.get('score'))}"
            )
            if details.get("reason"):
                text += f": “{details['reason']}”"
        elif action == "override.removed":
            text = (
                f"{who} removed the override of {whose} score "
                f"({_number(details.get('previous_override'))}; the graded "
                f"{_number(details.get('graded_score'))} counts again)"
            )
        elif action == "regrade.submission":
            text = (
                f"{who} had {whose} submission graded again "
                f"(it had {_number(details.get('old_score'))})"
            ) + _regrade_why(details)
        elif action == "regrade.exercise":
            count = details.get("submissions", 0)
            which = "outdated " if details.get("only_outdated") else ""
            text = (
                f"{who} had {count} {which}submission{'s' if count != 1 else ''} of {exercise} "
                "graded again"
            ) + _regrade_why(details)
        elif action == "assignment.set":
            due = details.get("due_at")
            due_words = (
                f"due {datetime.fromisoformat(due).strftime('%Y-%m-%d %H:%M UTC')}"
                if due
                else "no due date"
            )
            late = (
                "locked after the due date"
                if details.get("late_policy") == "lock"
                else f"{_number(details.get('late_penalty_percent_per_day'))}% off per day late"
            )
            text = (
                f"{who} set {exercise}: {due_words}, {late}, "
                f"the {details.get('scoring_policy', 'best')} submission counts"
            )
        elif action == "assignment.removed":
            text = f"{who} took {exercise} out of the course"
        elif action == "course.join-code":
            text = f"{who} made a new join code (the old one stopped working)"
        elif action == "course.instructor-added":
            text = f"{who} added {details.get('email', 'someone')} as an instructor"
        else:
            shown = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in details.items() if v)
            text = f"{who}: {action}" + (f" ({shown})" if shown else "")
        return text + "."

    def _learner_name(self) -> str:
        if self.learner is not None:
            return self.learner.name
        if self.submission is not None:
            return self.submission.learner
        return "a learner"


def _title(exercise_id: object) -> str:
    if not isinstance(exercise_id, str):
        return "an exercise"
    try:
        return get_exercise(exercise_id).title
    except UnknownExercise:
        return exercise_id


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "none"


def events(
    session: Session,
    *,
    course_id: str | None = None,
    submission_id: str | None = None,
    limit: int = 200,
) -> list[AuditEntry]:
    """Newest first, with the person who acted and the learner whose submission it names."""
    actor, learner = aliased(User), aliased(User)
    query = (
        select(AuditEvent, actor, Submission, learner)
        .outerjoin(actor, actor.id == AuditEvent.actor_id)
        .outerjoin(Submission, Submission.id == AuditEvent.submission_id)
        .outerjoin(learner, learner.id == Submission.user_id)
    )
    if course_id is not None:
        query = query.where(AuditEvent.course_id == course_id)
    if submission_id is not None:
        query = query.where(AuditEvent.submission_id == submission_id)
    rows = session.execute(query.order_by(AuditEvent.id.desc()).limit(limit)).all()
    return [AuditEntry(*row) for row in rows]


def _regrade_why(details: dict[str, Any]) -> str:
    """The end of a regrade's sentence: its reason and note, as far as they were given."""
    text = ""
    reason = details.get("reason")
    if reason in set(RegradeReason) and reason != RegradeReason.INSTRUCTOR_REQUEST:
        text += f": {RegradeReason(reason).words}"
    if details.get("note"):
        text += f" (“{details['note']}”)"
    return text
