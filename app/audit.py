"""The audit log: who changed a score or a course, when, and the values before and after."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from app.models import AuditEvent, RegradeReason, Submission, User
from graders.exercises import UnknownExercise, get_exercise


class AuditAction(enum.StrEnum):
    """What an audit event records; stored as its value in `audit_events.action`."""

    OVERRIDE_SET = "override.set"
    OVERRIDE_REMOVED = "override.removed"
    REGRADE_SUBMISSION = "regrade.submission"
    REGRADE_EXERCISE = "regrade.exercise"
    REGRADE_DRY_RUN = "regrade.dry-run"
    ASSIGNMENT_SET = "assignment.set"
    ASSIGNMENT_REMOVED = "assignment.removed"
    EXERCISE_LIST_CHANGED = "course.exercise-list"
    COURSE_JOIN_CODE = "course.join-code"
    COURSE_INSTRUCTOR_ADDED = "course.instructor-added"
    COURSE_STAFF_CHANGED = "course.staff-changed"
    COURSE_HINTS_SET = "course.hints-set"
    PASSWORD_RESET = "account.password-reset"
    ACCOUNT_DISABLED = "account.disabled"
    ACCOUNT_ENABLED = "account.enabled"
    SITE_ROLE_CHANGED = "account.site-role"
    ACCOUNT_DELETED = "account.deleted"
    ACCOUNTS_MERGED = "account.merged"
    LIMITS_SET = "limits.set"
    EXTENSION_SET = "extension.set"


def record_event(
    session: Session,
    *,
    actor: User | None,
    action: AuditAction,
    course_id: str | None = None,
    submission_id: str | None = None,
    **details: Any,
) -> AuditEvent:
    event = AuditEvent(
        actor_id=actor.id if actor else None,
        action=action.value,
        course_id=course_id,
        submission_id=submission_id,
        details=details,
    )
    session.add(event)
    session.flush()
    return event


@dataclass(frozen=True)
class Said:
    """What a sentence names: who acted, the exercise, whose submission of it, the details."""

    who: str
    exercise: str
    whose: str
    details: dict[str, Any]


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
        said = Said(who, exercise, f"{self._learner_name()}'s {exercise}", details)
        action = self.event.action
        if action in set(AuditAction):
            return SENTENCES[AuditAction(action)](said) + "."
        # An action no longer recorded: its name and details as they are.
        shown = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in details.items() if v)
        return f"{who}: {action}" + (f" ({shown})" if shown else "") + "."

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


def _override_set(said: Said) -> str:
    details = said.details
    before = details.get("previous_override")
    before = details.get("graded_score") if before is None else before
    text = (
        f"{said.who} overrode {said.whose} score {_number(before)} → "
        f"{_number(details.get('score'))}"
    )
    if details.get("reason"):
        text += f": “{details['reason']}”"
    return text + _counted_words(details)


def _counted_words(details: dict[str, Any]) -> str:
    """What an override change did to the learner's counted score (older events lack it)."""
    if "counted_after" not in details:
        return ""
    before, after = details.get("counted_before"), details.get("counted_after")
    if before == after:
        return f"; the counted score stays {_number(after)}"
    return f"; counted score {_number(before)} → {_number(after)}"


def _override_removed(said: Said) -> str:
    return (
        f"{said.who} removed the override of {said.whose} score "
        f"({_number(said.details.get('previous_override'))}; the graded "
        f"{_number(said.details.get('graded_score'))} counts again)"
    ) + _counted_words(said.details)


def _regrade_submission(said: Said) -> str:
    return (
        f"{said.who} had {said.whose} submission graded again "
        f"(it had {_number(said.details.get('old_score'))})"
    ) + _regrade_why(said.details)


def _regraded_submissions(said: Said) -> str:
    """What a regrade of an exercise ran: "12 outdated submissions of One training step"."""
    count = said.details.get("submissions", 0)
    which = "outdated " if said.details.get("only_outdated") else ""
    return f"{count} {which}submission{'s' if count != 1 else ''} of {said.exercise}"


def _regrade_exercise(said: Said) -> str:
    return f"{said.who} had {_regraded_submissions(said)} graded again" + _regrade_why(said.details)


def _regrade_dry_run(said: Said) -> str:
    return (
        f"{said.who} made a dry run of a regrade of {_regraded_submissions(said)} "
        "(nothing was changed)"
    )


def _assignment_set(said: Said) -> str:
    details = said.details
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
    changed = details.get("counted_scores_changed")
    return (
        f"{said.who} set {said.exercise}: {due_words}, {late}, "
        f"the {details.get('scoring_policy', 'best')} submission counts"
        + (
            ", the reference shown after the due date"
            if details.get("show_solution_after_due")
            else ""
        )
    ) + (f" ({changed} counted score{'s' if changed != 1 else ''} changed)" if changed else "")


def _changes(said: Said) -> str:
    changes = said.details.get("changes")
    return "; ".join(map(str, changes)) if isinstance(changes, list) else "changed"


def _extension_set(said: Said) -> str:
    details = said.details
    before, after = details.get("counted_before"), details.get("counted_after")
    counted = f"; counted score {_number(before)} → {_number(after)}" if before != after else ""
    return (
        f"{said.who} changed {details.get('learner', 'a learner')}'s terms for "
        f"{said.exercise}: {_changes(said)}{counted}"
    )


SENTENCES: dict[AuditAction, Callable[[Said], str]] = {
    AuditAction.OVERRIDE_SET: _override_set,
    AuditAction.OVERRIDE_REMOVED: _override_removed,
    AuditAction.REGRADE_SUBMISSION: _regrade_submission,
    AuditAction.REGRADE_EXERCISE: _regrade_exercise,
    AuditAction.REGRADE_DRY_RUN: _regrade_dry_run,
    AuditAction.ASSIGNMENT_SET: _assignment_set,
    AuditAction.LIMITS_SET: lambda said: f"{said.who} set {said.exercise}: {_changes(said)}",
    AuditAction.EXTENSION_SET: _extension_set,
    AuditAction.ASSIGNMENT_REMOVED: lambda said: (
        f"{said.who} took {said.exercise} out of the course"
    ),
    AuditAction.EXERCISE_LIST_CHANGED: lambda said: (
        f"{said.who} changed the course's exercise list: "
        + (
            f"the order is now {said.details['order']}"
            if "order" in said.details
            else f"{said.exercise} "
            + (
                f"to place {said.details['position']}"
                if "position" in said.details
                else f"under the unit {said.details.get('unit', '?')}"
            )
        )
    ),
    AuditAction.COURSE_JOIN_CODE: lambda said: (
        f"{said.who} made a new join code (the old one stopped working)"
    ),
    AuditAction.COURSE_INSTRUCTOR_ADDED: lambda said: (
        f"{said.who} added {said.details.get('email', 'someone')} as an instructor"
    ),
    AuditAction.COURSE_STAFF_CHANGED: lambda said: (
        f"{said.who} "
        + (
            "took {} out of the course"
            if said.details.get("change") == "remove"
            else "made {} a learner instead of an instructor"
        ).format(said.details.get("email", "someone"))
    ),
    AuditAction.COURSE_HINTS_SET: lambda said: (
        f"{said.who} set the hints: "
        + (
            f"each next level after {said.details.get('hint_unlock_attempts')} more attempt(s)"
            if said.details.get("hint_unlock_attempts")
            else "levels open one at a time"
        )
        + (", the corrected lines never shown" if said.details.get("hints_hide_fix") else "")
        + f", lesson links to {said.details.get('lesson_url') or 'the exercise prompt'}"
    ),
    AuditAction.PASSWORD_RESET: lambda said: (
        f"{said.details.get('email', 'An account')} set a new password with a reset link "
        f"({said.details.get('sessions_ended', 0)} other sessions ended)"
    ),
    AuditAction.ACCOUNT_DISABLED: lambda said: (
        f"{said.who} disabled the account {said.details.get('email', '')}"
    ),
    AuditAction.ACCOUNT_ENABLED: lambda said: (
        f"{said.who} enabled the account {said.details.get('email', '')}"
    ),
    AuditAction.ACCOUNT_DELETED: lambda said: f"{said.who} deleted their account",
    AuditAction.ACCOUNTS_MERGED: lambda said: (
        f"{said.who} merged the account {said.details.get('duplicate_email', '?')} into "
        f"{said.details.get('email', '?')}"
    ),
    AuditAction.SITE_ROLE_CHANGED: lambda said: (
        f"{said.who} made {said.details.get('email', 'an account')} "
        f"{said.details.get('old_role', '?')} → {said.details.get('new_role', '?')}"
    ),
}
