"""The counted score: what a learner's submissions for an exercise count in a course.

One rule, used by the course page, the gradebook and its CSV and JSON, grade passback and the
API, and said in the result, the history and the submission page:
- each graded submission counts a value: the instructor's override of it if there is one;
  otherwise its score after the late penalty (`late_penalty_percent_per_day` per started day
  after the learner's due date, up to 100%: the course's, or their own when an extension moved
  it); under the lock policy a late submission counts nothing;
- under the "best" policy the highest value counts (of equals, the earliest); under "latest"
  the latest submission's value. So under "best" submitting again, or an override of an older
  attempt, never lowers the counted score; an override of the counted attempt can.
A learner has `solved` an exercise once any submission scored full marks, late or not.

A learner who sent nothing, or only the untouched starter code (graded `not-started`), has not
started: `is_started` is that rule, and every page, statistic and filter reads it. A starter
submission counts nothing unless an instructor overrides it (the gradebook shows "—", not 0).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from app.courses.membership import AssignedExercise
from app.models import Extension, LatePolicy, ScoringPolicy, Submission, SubmissionStatus

State = Literal["not-tried", "tried", "solved"]
DAY = timedelta(days=1)
# The grader's diagnosis of the untouched starter code (graders/starter.py).
NOT_STARTED = "not-started"


def is_started(submission: Submission) -> bool:
    """Whether a submission shows any work of the learner's: anything but the untouched
    starter. One still being graded counts as started until its grade says otherwise."""
    return submission.diagnosis != NOT_STARTED


def late_days(created_at: datetime, due_at: datetime | None) -> int:
    """Started days after the due date (1 for a minute late); 0 when on time or undated."""
    if due_at is None or created_at <= due_at:
        return 0
    return math.ceil((created_at - due_at) / DAY)


def penalty_percent(assigned: AssignedExercise, days: int) -> float:
    if days == 0:
        return 0.0
    if assigned.assignment.late_policy == LatePolicy.LOCK:
        return 100.0
    return min(100.0, days * assigned.assignment.late_penalty_percent_per_day)


def is_solved(submission: Submission) -> bool:
    return (
        submission.status == SubmissionStatus.GRADED
        and submission.score is not None
        and submission.max_score is not None
        and submission.score >= submission.max_score
    )


class CountedAs(enum.StrEnum):
    """Why a graded submission counts what it counts."""

    GRADED = "graded"  # on time (or undated): its graded score
    LATE = "late"  # its graded score minus the late penalty
    LOCKED = "locked"  # late under the lock policy: nothing
    OVERRIDDEN = "overridden"  # the instructor's score for it


@dataclass(frozen=True)
class Standing:
    """What one graded submission counts under its exercise's policy, and why."""

    value: float
    counted_as: CountedAs
    late_by: timedelta
    late_days: int
    penalty_percent: float
    percent_per_day: float = 0.0  # the rule's, under the penalty policy


# Overrides to assume instead of the stored ones, by submission id (None: no override): what
# the counted score would be after a change, shown to the instructor before it is saved.
AssumedOverrides = Mapping[str, float | None]


def _override_of(submission: Submission, assumed: AssumedOverrides) -> float | None:
    if submission.id is not None and submission.id in assumed:
        return assumed[submission.id]
    return submission.override_score


def submission_standing(
    assigned: AssignedExercise, submission: Submission, assumed: AssumedOverrides | None = None
) -> Standing | None:
    """What a submission counts; None while it has no graded score, and for the untouched
    starter unless an instructor overrode its score (it counts nothing of itself)."""
    if submission.status != SubmissionStatus.GRADED or submission.score is None:
        return None
    due_at = assigned.due_at  # the learner's own, when an extension moved it
    late_by = submission.created_at - due_at if due_at and submission.created_at > due_at else None
    days = late_days(submission.created_at, due_at)
    late = (late_by or timedelta(0), days)
    override = _override_of(submission, assumed or {})
    if override is not None:
        return Standing(override, CountedAs.OVERRIDDEN, *late, 0.0)
    if not is_started(submission):
        return None
    if days == 0:
        return Standing(submission.score, CountedAs.GRADED, *late, 0.0)
    if assigned.assignment.late_policy == LatePolicy.LOCK:
        return Standing(0.0, CountedAs.LOCKED, *late, 100.0)
    percent = penalty_percent(assigned, days)
    value = round(submission.score * (1 - percent / 100), 4)
    per_day = assigned.assignment.late_penalty_percent_per_day
    return Standing(value, CountedAs.LATE, *late, percent, per_day)


def span_words(seconds: float) -> str:
    """A length of time in words, to the two largest units: "2 days, 3 hours", "5 minutes"."""
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60

    def unit(count: int, name: str) -> str:
        return f"{count} {name}{'' if count == 1 else 's'}"

    if days:
        return unit(days, "day") + (f", {unit(hours, 'hour')}" if hours else "")
    if hours:
        return unit(hours, "hour") + (f", {unit(minutes, 'minute')}" if minutes else "")
    return unit(max(minutes, 1), "minute")


def lateness_words(standing: Standing | None, max_score: float | None) -> str | None:
    """The one wording of a late submission, on every page that shows one: late by how much,
    the started days the rule counts, what it takes and what counts. A lock is said as a lock.
    None when it was on time (or an instructor's override is what counts).

    "Submitted 1 day, 7 hours late: 2 started days x 10% = -20% (a day counts from its first
    minute); counts 8/10" (with a multiplication and a minus sign)."""
    if standing is None or standing.counted_as not in (CountedAs.LATE, CountedAs.LOCKED):
        return None
    out_of = f"/{max_score:g}" if max_score is not None else ""
    late = f"Submitted {span_words(standing.late_by.total_seconds())} late"
    counts = f"counts {standing.value:g}{out_of}"
    if standing.counted_as == CountedAs.LOCKED:
        return f"{late}: locked, this exercise takes no late work; {counts}"
    if not standing.percent_per_day:
        return f"{late}: late work counts in full; {counts}"
    days = f"{standing.late_days} started day{'' if standing.late_days == 1 else 's'}"
    taken = f"{days} \N{MULTIPLICATION SIGN} {standing.percent_per_day:g}%"
    if standing.late_days * standing.percent_per_day > standing.penalty_percent:
        taken += f", capped at \N{MINUS SIGN}{standing.penalty_percent:g}%"
    else:
        taken += f" = \N{MINUS SIGN}{standing.penalty_percent:g}%"
    return f"{late}: {taken} (a day counts from its first minute); {counts}"


def standing_words(standing: Standing | None, max_score: float | None) -> str | None:
    """Why a result counts what it counts, for the learner; None when it counts as graded."""
    if standing is not None and standing.counted_as == CountedAs.OVERRIDDEN:
        out_of = f"/{max_score:g}" if max_score is not None else ""
        return f"overridden by your instructor to {standing.value:g}{out_of}"
    return lateness_words(standing, max_score)


@dataclass(frozen=True)
class Cell:
    """One learner's standing on one exercise."""

    exercise_id: str
    max_score: float
    score: float | None  # what counts; None while nothing graded counts
    state: State
    attempts: int  # submissions sent, the starter too (the attempt limit counts them)
    pending: int  # submissions still being graded
    counted_submission_id: str | None = None
    graded_score: float | None = None  # the counted submission's score before any penalty
    late_days: int = 0
    penalty_percent: float = 0.0
    overridden: bool = False
    locked: bool = False  # what counts is a late submission under the lock policy: 0
    standing: Standing | None = None  # what the counted submission counts, and why
    extension: Extension | None = None  # the learner's own terms for it, when given

    @property
    def lateness(self) -> str | None:
        """The counted submission's lateness in words (lateness_words); None when on time."""
        return lateness_words(self.standing, self.max_score)

    @property
    def counted_as(self) -> CountedAs | None:
        """Why the counted score is what it is; None while nothing counts."""
        if self.score is None:
            return None
        if self.overridden:
            return CountedAs.OVERRIDDEN
        if self.locked:
            return CountedAs.LOCKED
        return CountedAs.LATE if self.late_days else CountedAs.GRADED


def score_cell(
    assigned: AssignedExercise,
    submissions: list[Submission],
    assumed: AssumedOverrides | None = None,
) -> Cell:
    """The counted score of one learner's submissions (any order) for one exercise."""
    ordered = sorted(submissions, key=lambda s: s.created_at)
    max_score = assigned.exercise.max_score
    started = [s for s in ordered if is_started(s)]
    state: State = (
        "solved" if any(is_solved(s) for s in started) else "tried" if started else "not-tried"
    )
    pending = sum(
        1 for s in ordered if s.status in (SubmissionStatus.QUEUED, SubmissionStatus.RUNNING)
    )
    base = Cell(
        assigned.id, max_score, None, state, len(ordered), pending, extension=assigned.extension
    )

    standings = [
        (standing, submission)
        for submission in ordered
        if (standing := submission_standing(assigned, submission, assumed)) is not None
    ]
    if not standings:
        return base
    # A locked submission counts only when nothing else does: then it counts 0, said as such.
    counting = [c for c in standings if c[0].counted_as != CountedAs.LOCKED] or standings
    if assigned.assignment.scoring_policy == ScoringPolicy.LATEST:
        standing, submission = counting[-1]
    else:
        # max keeps the first of equals: the earliest.
        standing, submission = max(counting, key=lambda c: c[0].value)
    return replace(
        base,
        score=round(standing.value, 4),
        counted_submission_id=submission.id,
        graded_score=submission.score,
        late_days=standing.late_days,
        penalty_percent=standing.penalty_percent,
        overridden=standing.counted_as == CountedAs.OVERRIDDEN,
        locked=standing.counted_as == CountedAs.LOCKED,
        standing=standing,
    )
