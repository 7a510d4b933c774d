"""Submissions: accept one, claim it for grading, record its result. These flush, never commit."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    ColumnElement,
    Update,
    and_,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from app.courses.attempts import note_first_open
from app.courses.membership import AssignedExercise
from app.errors import AppError
from app.grading.results import MAX_ERROR_MESSAGE_CHARS, bounded_report, cut, stored_feedback
from app.models import (
    ExerciseOpen,
    LatePolicy,
    Regrade,
    Submission,
    SubmissionStatus,
    new_id,
    utc_now,
)
from app.outbox import ScoreChange, report_score_change
from app.people.names import hidden_character
from app.rate_limits import RateLimit, seconds_until_allowed
from app.retry_after import DRAIN_WINDOW_SECONDS, ReturnSchedule, drain_per_second
from graders.exercises import UnknownExercise, get_exercise, list_exercises
from graders.report import GradeReport

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
    """Raise QueueFull when too many submissions already wait for a grader."""
    if limits.max_waiting is None:
        return
    room = limits.max_waiting // 2 if anonymous_practice else limits.max_waiting
    waiting = session.scalar(
        select(func.count())
        .select_from(Submission)
        .where(Submission.status.in_([SubmissionStatus.QUEUED, SubmissionStatus.RUNNING]))
    )
    waiting = waiting or 0
    if waiting >= room:
        retry_after = QUEUE_RETURNS.retry_after_seconds(
            ahead=waiting - room + 1, per_second=gradings_per_second(session)
        )
        raise QueueFull(
            f"The graders are busy: {waiting} "
            f"{'submission is' if waiting == 1 else 'submissions are'} waiting to be graded. "
            f"Yours was not stored; send it again in {retry_after} s.",
            retry_after,
        )


def gradings_per_second(session: Session) -> float | None:
    """How fast the queue drains: gradings stored in the last DRAIN_WINDOW_SECONDS, by every
    worker (their `graded_at`, in the shared database); None when too few to tell."""
    now = utc_now()
    count, oldest = session.execute(
        select(func.count(), func.min(Submission.graded_at)).where(
            Submission.graded_at >= now - timedelta(seconds=DRAIN_WINDOW_SECONDS)
        )
    ).one()
    return drain_per_second(count, None if oldest is None else (now - oldest).total_seconds())


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


@dataclass(frozen=True)
class GradingJob:
    """What a worker needs to grade one claimed submission. `attempt` fences late writes."""

    submission_id: str
    exercise_id: str
    code: str
    attempt: int
    learner_key: str | None = None


# Whose cases a per-learner exercise grades a submission on (graders.exercises.for_learner):
# read from the stored owner at every claim, so a regrade gets the same cases. Anonymous
# practice has no learner to vary for: the declared cases.
LEARNER_KEY: ColumnElement[str | None] = case(
    (Submission.user_id.is_not(None), literal("user:") + Submission.user_id),
    (
        Submission.api_key_id.is_not(None),
        literal("api:") + Submission.api_key_id + literal(":") + Submission.learner,
    ),
    else_=None,
)


def user_learner_key(user_id: str) -> str:
    """LEARNER_KEY of a signed-in user's submissions, for what is shown before one exists."""
    return f"user:{user_id}"


# The grading path's statements (claim, renew, release, finish) are built once and run on the
# session's connection with only their values bound: building an ORM statement per call and
# executing it through the ORM cost two to four times the CPU of running it, for nothing the ORM
# adds here: no object is loaded or kept in step (docs/performance.md#statements-built-once).
def _update_submission(where: ColumnElement[bool], **values: object) -> Update:
    return update(Submission).where(where).values(**values).returning(Submission.id)


def _lease_expired(now: datetime | ColumnElement[datetime]) -> ColumnElement[bool]:
    # Rows running from before leases existed (no lease at all) count as expired.
    return and_(
        Submission.status == SubmissionStatus.RUNNING,
        or_(Submission.lease_expires_at.is_(None), Submission.lease_expires_at < now),
    )


# Only the claim that is still current may write: a stale worker's late result is dropped.
_CURRENT_CLAIM = and_(
    Submission.id == bindparam("claimed_id"),
    Submission.status == SubmissionStatus.RUNNING,
    Submission.attempts == bindparam("claimed_attempt"),
)
_CLAIM = (
    update(Submission)
    .where(
        Submission.id == bindparam("claimed_id"),
        or_(Submission.status == SubmissionStatus.QUEUED, _lease_expired(bindparam("now"))),
    )
    .values(
        status=SubmissionStatus.RUNNING,
        started_at=bindparam("now"),
        lease_expires_at=bindparam("lease_expires_at"),
        attempts=Submission.attempts + 1,
    )
    .returning(
        Submission.exercise_id, Submission.code, Submission.attempts, LEARNER_KEY.label("key")
    )
)
_RENEW = _update_submission(_CURRENT_CLAIM, lease_expires_at=bindparam("lease_expires_at"))
_RELEASE = _update_submission(
    _CURRENT_CLAIM,
    status=SubmissionStatus.QUEUED,
    lease_expires_at=None,
    queued_at=bindparam("now"),
)


@functools.cache
def _finish_statement(columns: tuple[str, ...]) -> Update:
    return _update_submission(
        _CURRENT_CLAIM, lease_expires_at=None, **{c: bindparam(f"set_{c}") for c in columns}
    )


@functools.cache
def _finish_regrades_statement(columns: tuple[str, ...]) -> Update:
    return (
        update(Regrade)
        .where(Regrade.submission_id == bindparam("claimed_id"), Regrade.finished_at.is_(None))
        .values(finished_at=bindparam("now"), **{c: bindparam(f"set_{c}") for c in columns})
    )


def _claim_values(job: GradingJob) -> dict[str, object]:
    return {"claimed_id": job.submission_id, "claimed_attempt": job.attempt}


def _set_values(values: dict[str, object]) -> dict[str, object]:
    return {f"set_{column}": value for column, value in values.items()}


def claim_submission(
    session: Session, submission_id: str, *, lease_seconds: float
) -> GradingJob | None:
    """Mark the submission running under a lease, atomically; None if it is not claimable.

    Claimable: queued, or running under a lease that expired (its worker died). One UPDATE
    decides: on PostgreSQL a second claimant waits for the first's row lock, then finds the
    row no longer claimable; SQLite runs one writer at a time.
    """
    now = utc_now()
    row = (
        session.connection()
        .execute(
            _CLAIM,
            {
                "claimed_id": submission_id,
                "now": now,
                "lease_expires_at": now + timedelta(seconds=lease_seconds),
            },
        )
        .one_or_none()
    )
    if row is None:
        return None
    return GradingJob(submission_id, row.exercise_id, row.code, row.attempts, row.key)


def renew_lease(session: Session, job: GradingJob, *, lease_seconds: float) -> bool:
    """Extend the worker's claim; False if the claim was taken over (the lease had expired)."""
    expires_at = utc_now() + timedelta(seconds=lease_seconds)
    result = session.connection().execute(
        _RENEW, {**_claim_values(job), "lease_expires_at": expires_at}
    )
    return result.one_or_none() is not None


def release_claim(session: Session, job: GradingJob) -> bool:
    """Put a claimed submission back in the queue (the sandbox failed, not the learner)."""
    result = session.connection().execute(_RELEASE, {**_claim_values(job), "now": utc_now()})
    return result.one_or_none() is not None


def _finish(session: Session, job: GradingJob, **values: object) -> bool:
    statement = _finish_statement(tuple(values))
    result = session.connection().execute(statement, {**_claim_values(job), **_set_values(values)})
    return result.one_or_none() is not None


def _finish_regrades(session: Session, job: GradingJob, **values: object) -> None:
    # A regrade in progress for this submission now has its new result.
    statement = _finish_regrades_statement(tuple(values))
    session.connection().execute(
        statement, {**_claim_values(job), "now": utc_now(), **_set_values(values)}
    )


def record_report(
    session: Session,
    job: GradingJob,
    report: GradeReport,
    *,
    grading_wall_seconds: float | None = None,
) -> bool:
    """Store the grader's result and mark the submission graded; False if the claim is stale.

    `grading_wall_seconds`: how long the grading took, its wait for the release included
    (app/grading/fair_claim.py)."""
    report = bounded_report(report)
    stored = _finish(
        session,
        job,
        status=SubmissionStatus.GRADED,
        graded_at=utc_now(),
        grading_wall_seconds=grading_wall_seconds,
        # The version graded against, which after a restart may be newer than the submitted one.
        exercise_version=report.exercise_version,
        score=report.score,
        max_score=report.max_score,
        diagnosis=report.diagnosis,
        checks=[check.model_dump(mode="json") for check in report.checks],
        **stored_feedback(report),
        plots=[plot.model_dump(mode="json") for plot in report.plots],
        output=report.output,
        error_message=None,
    )
    if stored:
        # In this transaction: the result and what reports it elsewhere commit together.
        report_score_change(session, ScoreChange.GRADED, job.submission_id)
        _finish_regrades(
            session,
            job,
            new_status=SubmissionStatus.GRADED,
            new_score=report.score,
            new_max_score=report.max_score,
            new_diagnosis=report.diagnosis,
            new_exercise_version=report.exercise_version,
        )
    return stored


def record_error(session: Session, job: GradingJob, message: str) -> bool:
    """Mark the submission failed by a server fault; False if the claim is stale."""
    stored = _finish(
        session,
        job,
        status=SubmissionStatus.ERROR,
        error_message=cut(message, MAX_ERROR_MESSAGE_CHARS),
    )
    if stored:
        _finish_regrades(session, job, new_status=SubmissionStatus.ERROR)
    return stored


def requeue_expired_leases(session: Session) -> list[str]:
    """Put back running submissions whose worker stopped renewing the lease; return their ids.

    Each is queued for grading (sent once the transaction commits). Safe to run on every host
    at once: each row is requeued by one UPDATE only.
    """
    submission_ids = list(
        session.scalars(
            update(Submission)
            .where(_lease_expired(utc_now()))
            .values(status=SubmissionStatus.QUEUED, lease_expires_at=None, queued_at=utc_now())
            .returning(Submission.id)
            .execution_options(synchronize_session=False)
        )
    )
    for submission_id in submission_ids:
        queue_for_grading(session, submission_id)
    return submission_ids


def requeue_waiting(session: Session, *, queued_before: datetime | None) -> list[str]:
    """Ids of queued submissions to send to the workers again, oldest first, marked as sent.

    `queued_before` None takes every queued row (a start whose in-process queue is empty);
    otherwise those queued before it, whose broker message was likely lost. One UPDATE
    marks and returns them, so two hosts sweeping at once do not both send a row; each is
    queued for grading (sent once the transaction commits).
    """
    waiting = Submission.status == SubmissionStatus.QUEUED
    if queued_before is not None:
        waiting = and_(
            waiting,
            or_(Submission.queued_at.is_(None), Submission.queued_at < queued_before),
        )
    rows = session.execute(
        update(Submission)
        .where(waiting)
        .values(queued_at=utc_now())
        .returning(Submission.id, Submission.created_at)
        .execution_options(synchronize_session=False)
    ).all()
    submission_ids = [row.id for row in sorted(rows, key=lambda row: row.created_at)]
    for submission_id in submission_ids:
        queue_for_grading(session, submission_id)
    return submission_ids


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
