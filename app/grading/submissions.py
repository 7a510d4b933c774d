"""Submissions: the rules of intake (limits, open, code), creating one, and reading one by id (a
learner's, newest first, is app/submission_history.py). These flush, never commit; grading one is
app/grading/jobs.py.

One idea over 400 lines: what a submission must meet to be accepted (size, text, open, attempts,
rate, the queue's room), and its row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    and_,
    func,
    select,
)
from sqlalchemy.orm import Session

from app.courses.attempts import note_first_open
from app.courses.membership import AssignedExercise
from app.errors import AppError
from app.grading.queue_gauge import REFUSED_BY_FULL_QUEUE, report_waiting
from app.models import (
    ExerciseOpen,
    LatePolicy,
    Submission,
    SubmissionStatus,
    new_id,
    utc_now,
)
from app.operations import QUEUE_FULL_REFUSALS
from app.people.names import hidden_character
from app.rate_limits import RateLimit, seconds_until_allowed
from app.retry_after import DRAIN_WINDOW_SECONDS, MAX_RUN, ReturnSchedule, drain_per_second
from graders.exercises import UnknownExercise, get_exercise, list_exercises

MAX_LEARNER_CHARS = 255

# session.info key: the submissions to hand to a worker once this transaction commits.
SUBMISSIONS_TO_GRADE = "submissions_to_grade"


def queue_for_grading(session: Session, submission_id: str) -> None:
    """Have the submission graded once this transaction commits (app.grading.queue's hook).

    Never before the commit: a worker must find the row, and a rolled-back one must not run.
    """
    session.info.setdefault(SUBMISSIONS_TO_GRADE, []).append(submission_id)


class SubmissionRejected(AppError, ValueError):
    """The submission breaks a rule; the message says which, and how to fix it."""

    status_code = 422
    title = "Not accepted"


class CodeTooLarge(SubmissionRejected):
    """The code is over the size limit."""

    status_code = 413
    title = "Too large"


class UnknownExerciseId(SubmissionRejected):
    """No exercise has the id the submission names."""


class AssignmentClosed(SubmissionRejected):
    """The learner may submit here no more: the course locks this exercise after its due date,
    which has passed, or their timed attempt's time ran out (`check_open`)."""

    status_code = 403
    title = "Closed"

    def __init__(self, message: str, *, short_reason: str, since: datetime | None) -> None:
        super().__init__(message)
        # Why, in a few words for beside a link to the exercise ("closed since", then `since`).
        self.short_reason = short_reason
        self.since = since


class AttemptsUsedUp(AssignmentClosed):
    """The learner made every submission the exercise allows them."""

    title = "No attempts left"


class TooManySubmissions(SubmissionRejected):
    """The learner reached the submission rate limit; `retry_after_seconds` until the next."""

    status_code = 429
    title = "Too many submissions"

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_seconds)})
        self.retry_after_seconds = retry_after_seconds


class QueueFull(SubmissionRejected):
    """Too many submissions wait for a grader; nothing was stored, the client may retry."""

    status_code = 503
    title = "Graders busy"

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_seconds)})
        self.retry_after_seconds = retry_after_seconds


# The return times this process hands to submissions the full queue refused.
QUEUE_RETURNS = ReturnSchedule()


@dataclass(frozen=True)
class SubmissionLimits:
    """The caps a new submission must be under (Settings' `submission_*` and `*_queued_*`).

    `per_learner`: each learner's submissions. `anonymous_per_address`: practice without an
    account from one client address, which dropping the learner cookie does not reset;
    `anonymous_in_total`: from all addresses (each keeps its code). `max_waiting`:
    submissions queued or being graded; anonymous practice is refused at half of it, so that
    courses and the API keep room when strangers fill the queue.
    """

    per_learner: RateLimit | None = None
    anonymous_per_address: RateLimit | None = None
    anonymous_in_total: RateLimit | None = None
    max_waiting: int | None = None


def check_rate(
    session: Session,
    limits: SubmissionLimits,
    *,
    learner: str,
    user_id: str | None,
    course_id: str | None,
    client_address: str | None,
) -> None:
    """Raise TooManySubmissions when this learner already used up the window, or when
    anonymous practice from `client_address` (given for anonymous practice only) did."""
    if user_id is not None:
        whose = Submission.user_id == user_id
    else:
        whose = and_(
            Submission.user_id.is_(None),
            Submission.learner == learner,
            Submission.course_id.is_(None)
            if course_id is None
            else Submission.course_id == course_id,
        )
    checks = [(limits.per_learner, whose, "You have")]
    if client_address is not None:
        from_address = and_(
            Submission.user_id.is_(None),
            Submission.api_key_id.is_(None),
            Submission.client_address == client_address,
        )
        checks.append(
            (limits.anonymous_per_address, from_address, "Practice from your address has")
        )
        anonymous = Submission.client_address.is_not(None)
        checks.append((limits.anonymous_in_total, anonymous, "Practice without an account has"))
    for limit, condition, who in checks:
        retry_after = seconds_until_allowed(session, limit, Submission.created_at, condition)
        if limit is not None and retry_after is not None:
            raise TooManySubmissions(
                f"{who} reached the limit of {limit.describe('submission')}. "
                f"You can submit again in {retry_after} s.",
                retry_after,
            )


def check_waiting(session: Session, limits: SubmissionLimits, *, anonymous_practice: bool) -> None:
    """Raise QueueFull when too many submissions already wait for a grader. The count is told
    to admission control's gauge (app/grading/queue_gauge.py), which refuses the next ones early
    while the queue stays full."""
    if limits.max_waiting is None:
        return
    room = limits.max_waiting // 2 if anonymous_practice else limits.max_waiting
    waiting = session.scalar(
        select(func.count())
        .select_from(Submission)
        .where(Submission.status.in_([SubmissionStatus.QUEUED, SubmissionStatus.RUNNING]))
    )
    waiting = waiting or 0
    report_waiting(session, waiting)
    if waiting >= room:
        session.info[REFUSED_BY_FULL_QUEUE] = True
        raise queue_full(waiting - room + 1, waiting, gradings_per_second(session))


def queue_full(
    ahead: int, waiting: int, per_second: float | None, *, at_least: bool = False
) -> QueueFull:
    """The refusal of a full queue, with `ahead` submissions to leave before there is room for
    this one, `waiting` in all (`at_least`: a lower bound, app/admission.py's early refusal),
    and the queue's drain rate `per_second`."""
    retry_after = QUEUE_RETURNS.retry_after_seconds(ahead=ahead, per_second=per_second)
    QUEUE_FULL_REFUSALS.labels(at="admission" if at_least else "intake").inc()
    return QueueFull(
        f"The graders are busy: {'at least ' if at_least else ''}{waiting} "
        f"{'submission is' if waiting == 1 else 'submissions are'} waiting to be graded. "
        f"Yours was not stored; send it again in {retry_after} s.",
        retry_after,
    )


def gradings_per_second(session: Session) -> float | None:
    """How fast the queue drains: the latest gradings stored in the last DRAIN_WINDOW_SECONDS,
    by every worker (their `graded_at`, in the shared database); None when too few to tell."""
    now = utc_now()
    graded_at = session.scalars(
        select(Submission.graded_at)
        .where(Submission.graded_at >= now - timedelta(seconds=DRAIN_WINDOW_SECONDS))
        .order_by(Submission.graded_at.desc())
        .limit(MAX_RUN)
    ).all()
    return drain_per_second([(now - at).total_seconds() for at in graded_at if at is not None])


@dataclass(frozen=True)
class LearnerLimits:
    """Where one learner stands against an exercise's attempt limit and timed attempt."""

    attempts_made: int  # submissions stored, but not those the server failed to grade
    max_attempts: int | None
    ends_at: datetime | None  # when a timed attempt's time runs out; None: untimed or not opened

    @property
    def attempts_left(self) -> int | None:
        if self.max_attempts is None:
            return None
        return max(0, self.max_attempts - self.attempts_made)


def learner_limits(
    session: Session, assigned: AssignedExercise, *, user_id: str | None, learner: str
) -> LearnerLimits:
    """`assigned` is the exercise as set for this learner (with their extension)."""
    course_id = assigned.assignment.course_id
    made = 0
    if assigned.max_attempts is not None:
        mine = (
            Submission.user_id == user_id
            if user_id is not None
            else and_(Submission.user_id.is_(None), Submission.learner == learner)
        )
        made = (
            session.scalar(
                select(func.count())
                .select_from(Submission)
                .where(
                    Submission.course_id == course_id,
                    Submission.exercise_id == assigned.id,
                    Submission.status != SubmissionStatus.ERROR,
                    mine,
                )
            )
            or 0
        )
    ends_at = None
    minutes = assigned.time_limit_minutes
    if minutes is not None and user_id is not None:
        opened_at = session.scalar(
            select(ExerciseOpen.opened_at).where(
                ExerciseOpen.course_id == course_id,
                ExerciseOpen.exercise_id == assigned.id,
                ExerciseOpen.user_id == user_id,
            )
        )
        if opened_at is not None:
            ends_at = opened_at + timedelta(minutes=minutes)
    return LearnerLimits(made, assigned.max_attempts, ends_at)


def check_open(
    assigned: AssignedExercise | None, now: datetime, limits: LearnerLimits | None = None
) -> None:
    """Raise AssignmentClosed when the exercise is locked after the learner's due date, or
    their time or attempts (`limits`) are used up."""
    if assigned is None:
        return
    due_at = assigned.due_at
    if due_at is not None and assigned.assignment.late_policy == LatePolicy.LOCK and now > due_at:
        raise AssignmentClosed(
            f"This exercise was due {due_at:%Y-%m-%d %H:%M} UTC"
            f"{' (extended for you)' if assigned.due_extended else ''} and is now closed: "
            "the course accepts no late submissions.",
            short_reason="closed since",
            since=due_at,
        )
    if limits is None:
        return
    if limits.attempts_left == 0:
        raise AttemptsUsedUp(
            f"You have made all {limits.max_attempts} submissions this exercise allows you. "
            "Ask your instructor if you need more attempts.",
            short_reason="no attempts left",
            since=None,
        )
    if limits.ends_at is not None and now > limits.ends_at:
        raise AssignmentClosed(
            f"Your time for this timed exercise ran out at {limits.ends_at:%Y-%m-%d %H:%M} UTC "
            f"({assigned.time_limit_minutes} minutes from when you first opened it). "
            "Ask your instructor if you need more time.",
            short_reason="your time ran out at",
            since=limits.ends_at,
        )


def _check_text(field: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SubmissionRejected(
            f"{field} is not valid Unicode text (a lone surrogate at character {exc.start})"
        ) from None
    nul_at = value.find("\0")
    if nul_at != -1:
        raise SubmissionRejected(
            f"{field} contains a NUL character (\\u0000) at character {nul_at}; remove it"
        )


def check_code(code: str, max_code_bytes: int) -> None:
    """Raise SubmissionRejected unless `code` is text (no NUL) of at most `max_code_bytes`."""
    _check_text("code", code)
    code_bytes = len(code.encode("utf-8"))
    if code_bytes > max_code_bytes:
        raise CodeTooLarge(
            f"code is {code_bytes} bytes; the limit is {max_code_bytes} bytes "
            f"({max_code_bytes // 1024} KiB)"
        )


def create_submission(
    session: Session,
    *,
    exercise_id: str,
    learner: str,
    code: str,
    api_key_id: str | None = None,
    user_id: str | None = None,
    course_id: str | None = None,
    assigned: AssignedExercise | None = None,
    limits: SubmissionLimits | None = None,
    client_address: str | None = None,
    upload_filename: str | None = None,
    upload_notices: list[str] | None = None,
    personal_token_id: str | None = None,
) -> Submission:
    """Validate and store a queued submission. Raises SubmissionRejected (or a subclass).

    The code's text (size, NUL, Unicode) is checked once, before this, by the one intake path
    (`app.grading.intake.accept_submission`).

    In a course, `assigned` is the exercise as the course sets it for this learner (with their
    extension): its lock after the due date, its attempt limit and its timed attempt apply (a
    learner whose open of the exercise was not recorded starts the clock now). `limits` caps
    the learner's submissions (TooManySubmissions) and the queue (QueueFull).
    `client_address` (pages only) is kept with anonymous practice, to limit it.
    """
    try:
        exercise = get_exercise(exercise_id)
    except UnknownExercise:
        known = ", ".join(exercise.id for exercise in list_exercises())
        raise UnknownExerciseId(
            f"unknown exercise {exercise_id[:100]!r}; known exercises: {known}"
        ) from None

    if not code.strip():
        raise SubmissionRejected(f"code is empty: paste your {exercise.entry_point} function")

    _check_text("learner", learner)
    if not learner.strip():
        raise SubmissionRejected("learner is empty: send the learner's id in your system")
    if len(learner) > MAX_LEARNER_CHARS:
        raise SubmissionRejected(
            f"learner is {len(learner)} characters; the limit is {MAX_LEARNER_CHARS}"
        )
    hidden = hidden_character(learner)
    if hidden is not None:
        # Instructors' pages show the id: it must not hide or reorder what is around it.
        raise SubmissionRejected(f"learner contains {hidden}, which does not show; remove it")
    if assigned is not None:
        if assigned.time_limit_minutes is not None and user_id is not None:
            note_first_open(
                session,
                course_id=assigned.assignment.course_id,
                exercise_id=assigned.id,
                user_id=user_id,
            )
        learner_standing = learner_limits(session, assigned, user_id=user_id, learner=learner)
        # Two submissions sent at once may both pass the attempt limit: each is checked
        # against those committed before it, which is enough for a limit set to teach.
        check_open(assigned, utc_now(), learner_standing)
    limits = limits or SubmissionLimits()
    anonymous_practice = user_id is None and course_id is None and api_key_id is None
    check_rate(
        session,
        limits,
        learner=learner,
        user_id=user_id,
        course_id=course_id,
        client_address=client_address if anonymous_practice else None,
    )
    check_waiting(session, limits, anonymous_practice=anonymous_practice)

    submission = Submission(
        id=new_id(),
        exercise_id=exercise.id,
        exercise_version=exercise.version,
        learner=learner,
        code=code,
        status=SubmissionStatus.QUEUED,
        attempts=0,
        api_key_id=api_key_id,
        user_id=user_id,
        course_id=course_id,
        personal_token_id=personal_token_id,
        upload_filename=upload_filename,
        upload_notices=upload_notices or None,
        client_address=client_address if anonymous_practice else None,
    )
    # Not flushed here: the row goes in when the request's transaction commits, in the same
    # call as the commit. On SQLite the INSERT takes the one write lock, and flushed here it held
    # it through the rest of the request (the answer's thread hops), about 10 ms a submission
    # and up to a quarter of a second under a burst, while every grading waited to claim or
    # store (docs/performance.md#a-submissions-insert-goes-in-with-the-commit). Its id is set
    # now, for the answer and the queue.
    session.add(submission)
    queue_for_grading(session, submission.id)
    return submission


def get_submission(session: Session, submission_id: str) -> Submission | None:
    return session.get(Submission, submission_id)
