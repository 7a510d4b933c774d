"""Database tables. The submission row is also the grading job's record.

Kept whole: app/'s tables in one module, which the migrations compare against (with
app/integrations/models.py).

People: users (a site role), their web sessions, courses with enrolments (a course role) and
assignments (due date, late and scoring policy). Every change an instructor makes to a score
(an override, a regrade) leaves an audit event.
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return str(uuid.uuid4())


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware datetime stored in UTC; SQLite's naive values are read back as UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: *_at columns take aware datetimes")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class SubmissionStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    GRADED = "graded"
    ERROR = "error"


# The statuses a submission ends in: nothing changes it after, but a regrade.
FINISHED = (SubmissionStatus.GRADED, SubmissionStatus.ERROR)


class SiteRole(enum.StrEnum):
    """What a user may do across the site: an admin everything, an instructor create courses."""

    ADMIN = "admin"
    INSTRUCTOR = "instructor"
    LEARNER = "learner"


class CourseRole(enum.StrEnum):
    LEARNER = "learner"
    INSTRUCTOR = "instructor"


class LatePolicy(enum.StrEnum):
    PENALTY = "penalty"  # accepted, minus a share of the score per day late
    LOCK = "lock"  # refused after the due date


class ScoringPolicy(enum.StrEnum):
    BEST = "best"
    LATEST = "latest"


class RegradeReason(enum.StrEnum):
    """Why an instructor had submissions graded again; the learner is told it in these words."""

    EXERCISE_UPDATED = "exercise-updated"
    GRADER_UPDATED = "grader-updated"
    INSTRUCTOR_REQUEST = "instructor-request"

    @property
    def words(self) -> str:
        return REGRADE_REASON_WORDS[self]


REGRADE_REASON_WORDS = {
    RegradeReason.EXERCISE_UPDATED: "the exercise was updated",
    RegradeReason.GRADER_UPDATED: "the grader was corrected",
    RegradeReason.INSTRUCTOR_REQUEST: "your instructor had it graded again",
}


class User(Base):
    """A person with a local account. Only the argon2 hash of the password is kept."""

    __tablename__ = "users"
    __table_args__ = (
        CheckConstraint("site_role IN ('admin', 'instructor', 'learner')", name="site_role_known"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    # Stored lower-cased: the sign-in form compares it as typed, lower-cased.
    email: Mapped[str] = mapped_column(String(255), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    password_hash: Mapped[str] = mapped_column(String(255))
    site_role: Mapped[str] = mapped_column(String(16), default=SiteRole.LEARNER)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    # Set by an administrator: the account cannot sign in and its sessions are gone.
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @property
    def is_admin(self) -> bool:
        return self.site_role == SiteRole.ADMIN


class WebSession(Base):
    """A signed-in browser. The cookie holds a random token; only its SHA-256 is kept here."""

    __tablename__ = "web_sessions"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Where it was signed in from, shown to the account's owner (None before 0012).
    client_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(200))
    # Set for a session an LMS launch started: the LMS page's origin. Such a session has no
    # "Sign out" (it ends with the LMS's), and its frame's messages go to that origin.
    lms_origin: Mapped[str | None] = mapped_column(String(255))


class SignInFailure(Base):
    """A failed sign-in, counted for rate limiting by email and by client address."""

    __tablename__ = "sign_in_failures"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    email: Mapped[str] = mapped_column(String(255), index=True)
    client_ip: Mapped[str] = mapped_column(String(64), index=True)
    failed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, index=True)


class PasswordResetRequest(Base):
    """A "forgot password" form sent, counted per client address and per email for its rate
    limit. When the email had an account, the row holds the reset link's token: only its
    SHA-256, usable once (`used_at`) until `expires_at`."""

    __tablename__ = "password_reset_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    email: Mapped[str] = mapped_column(String(255), index=True)
    client_address: Mapped[str] = mapped_column(String(64), index=True)
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, index=True)
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"), index=True)
    token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class SignUp(Base):
    """An account made through the open sign-up form, counted per client address and in all;
    kept only while a window counts it."""

    __tablename__ = "sign_ups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    client_address: Mapped[str] = mapped_column(String(64), index=True)
    signed_up_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, index=True)


class Course(Base):
    """A class of learners with its instructors; learners join with the join code."""

    __tablename__ = "courses"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    join_code: Mapped[str] = mapped_column(String(16), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    created_by_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"))
    # Hints (app/courses/hints.py): attempts with a diagnosis between one hint level and the
    # next (0: one at a time, no wait); whether the last level, the corrected lines, is never
    # shown; the course's own lesson page that each diagnosis links to ("" for the prompt's).
    hint_unlock_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    hints_hide_fix: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    lesson_url: Mapped[str] = mapped_column(String(2000), default="", server_default="")


class Enrolment(Base):
    """A user's role in one course."""

    __tablename__ = "enrolments"
    __table_args__ = (
        UniqueConstraint("course_id", "user_id"),
        CheckConstraint("role IN ('learner', 'instructor')", name="role_known"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    course_id: Mapped[str] = mapped_column(ForeignKey("courses.id"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    role: Mapped[str] = mapped_column(String(16), default=CourseRole.LEARNER)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class Assignment(Base):
    """An exercise set in a course: when it is due and how its submissions are scored."""

    __tablename__ = "assignments"
    __table_args__ = (
        UniqueConstraint("course_id", "exercise_id"),
        CheckConstraint("late_policy IN ('penalty', 'lock')", name="late_policy_known"),
        CheckConstraint("scoring_policy IN ('best', 'latest')", name="scoring_policy_known"),
        CheckConstraint(
            "late_penalty_percent_per_day >= 0 AND late_penalty_percent_per_day <= 100",
            name="late_penalty_percent",
        ),
        CheckConstraint("max_attempts IS NULL OR max_attempts >= 1", name="max_attempts"),
        CheckConstraint(
            "time_limit_minutes IS NULL OR time_limit_minutes >= 1", name="time_limit_minutes"
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    course_id: Mapped[str] = mapped_column(ForeignKey("courses.id"))
    exercise_id: Mapped[str] = mapped_column(String(100))
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    late_policy: Mapped[str] = mapped_column(String(16), default=LatePolicy.PENALTY)
    late_penalty_percent_per_day: Mapped[float] = mapped_column(Float, default=0.0)
    scoring_policy: Mapped[str] = mapped_column(String(16), default=ScoringPolicy.BEST)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    # Submissions a learner may make (None: no limit); an extension adds to it per learner.
    max_attempts: Mapped[int | None] = mapped_column(Integer)
    # A timed attempt: minutes from the learner's first open of the exercise (None: untimed).
    time_limit_minutes: Mapped[int | None] = mapped_column(Integer)
    # The reference solution shown to a learner once the due date has passed for them.
    show_solution_after_due: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )
    # The course's own order and unit for it (None: the exercise's own, from exercise.toml).
    position: Mapped[int | None] = mapped_column(Integer)
    unit: Mapped[str | None] = mapped_column(String(80))
    # Removed from the course: hidden from its learners; its submissions, grades and these
    # policies stay, and adding it back restores them.
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ApiKey(Base):
    """A client of the REST API. Only the SHA-256 of the secret is kept.

    A key tied to a course submits into it and reads only its submissions; a key from before
    courses (no course) reads only submissions made without a course.
    """

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    course_id: Mapped[str | None] = mapped_column(ForeignKey("courses.id"), index=True)


class PersonalToken(Base):
    """A learner's personal access token for the command-line client and the notebook magic.

    Only the SHA-256 of the secret is kept. It acts for its user alone: it submits as them and
    reads their own submissions and exercises, nothing of anyone else's, until it expires or is
    revoked.
    """

    __tablename__ = "personal_tokens"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Submission(Base):
    """One learner's code for one exercise, its grading state and, once graded, its result."""

    __tablename__ = "submissions"
    __table_args__ = (
        CheckConstraint("status IN ('queued', 'running', 'graded', 'error')", name="status_known"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    exercise_id: Mapped[str] = mapped_column(String(100), index=True)
    exercise_version: Mapped[str] = mapped_column(String(64))
    learner: Mapped[str] = mapped_column(String(255), index=True)
    code: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default=SubmissionStatus.QUEUED, index=True)
    score: Mapped[float | None] = mapped_column(Float)
    max_score: Mapped[float | None] = mapped_column(Float)
    diagnosis: Mapped[str | None] = mapped_column(String(64))
    checks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    feedback: Mapped[str | None] = mapped_column(Text)
    # The keys of the claims that held (graders.claims), and the facts' sentences as said (each
    # a dict, graders.sentences.Said). Not NULL: `feedback` holds the grader's facts alone, as
    # said then, and the words of the facts, the diagnosis and the claims are rendered when the
    # result is read (app/grading/results.py), so rewording them changes no stored grade. NULL:
    # a result stored before (0024), whose `feedback` holds every word as it was said then.
    feedback_claims: Mapped[list[str | dict[str, Any]] | None] = mapped_column(JSON)
    plots: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    # What the code printed in the visible cases (never the hidden ones).
    output: Mapped[str | None] = mapped_column(Text)
    # Operator-facing: why the server could not grade it. Never shown to learners.
    error_message: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, index=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When it was last handed to the workers; queued long after that, its message was lost.
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=utc_now)
    # A running submission's claim lasts until then unless its worker renews it.
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    graded_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    # How long its last grading held a slot (its whole wall time: sleeping holds one too). The
    # owner's recent sum decides which queued submission a Celery worker takes next.
    grading_wall_seconds: Mapped[float | None] = mapped_column(Float)
    api_key_id: Mapped[str | None] = mapped_column(ForeignKey("api_keys.id"), index=True)
    # Who submitted from the pages or a personal token (None for the API and anonymous
    # practice), and where.
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"), index=True)
    course_id: Mapped[str | None] = mapped_column(ForeignKey("courses.id"), index=True)
    # Sent by the learner's client with this personal token (user_id is the token's user).
    personal_token_id: Mapped[str | None] = mapped_column(ForeignKey("personal_tokens.id"))
    upload_filename: Mapped[str | None] = mapped_column(String(255))
    # Anonymous practice only: the client address it came from, which its rate limit counts.
    client_address: Mapped[str | None] = mapped_column(String(64), index=True)
    # What was left out of an uploaded notebook, said for the learner.
    upload_notices: Mapped[list[str] | None] = mapped_column(JSON)
    # An instructor's score, which counts instead of the graded one until it is removed.
    override_score: Mapped[float | None] = mapped_column(Float)
    override_reason: Mapped[str | None] = mapped_column(Text)
    override_by_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"))
    override_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class DryRunGrade(Base):
    """One submission graded again in a regrade's dry run: the new result is kept here only.
    The submission, its outbox and the LMS never see it; the row is the dry run's job record."""

    __tablename__ = "dry_run_grades"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    batch_id: Mapped[str] = mapped_column(String(36), index=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), index=True)
    requested_by_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"))
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    # queued, running, graded or error (a SubmissionStatus), as a submission's.
    status: Mapped[str] = mapped_column(String(16), default="queued")
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=utc_now)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    new_score: Mapped[float | None] = mapped_column(Float)
    new_max_score: Mapped[float | None] = mapped_column(Float)
    new_diagnosis: Mapped[str | None] = mapped_column(String(64))
    new_exercise_version: Mapped[str | None] = mapped_column(String(64))
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Regrade(Base):
    """One submission graded again: the result before, and after once the worker is done."""

    __tablename__ = "regrades"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    # Regrades asked for together (every submission of an exercise) share a batch.
    batch_id: Mapped[str] = mapped_column(String(36), index=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), index=True)
    requested_by_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"))
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    old_status: Mapped[str] = mapped_column(String(16))
    old_score: Mapped[float | None] = mapped_column(Float)
    old_max_score: Mapped[float | None] = mapped_column(Float)
    old_diagnosis: Mapped[str | None] = mapped_column(String(64))
    old_exercise_version: Mapped[str] = mapped_column(String(64))
    new_status: Mapped[str | None] = mapped_column(String(16))
    new_score: Mapped[float | None] = mapped_column(Float)
    new_max_score: Mapped[float | None] = mapped_column(Float)
    new_diagnosis: Mapped[str | None] = mapped_column(String(64))
    new_exercise_version: Mapped[str | None] = mapped_column(String(64))
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Why it was asked for (a RegradeReason), and the instructor's note; None before 0009.
    reason: Mapped[str | None] = mapped_column(String(32))
    note: Mapped[str | None] = mapped_column(Text)

    @property
    def changed(self) -> bool:
        """Finished with another score or diagnosis than before."""
        return self.finished_at is not None and (self.new_score, self.new_diagnosis) != (
            self.old_score,
            self.old_diagnosis,
        )

    @property
    def reason_words(self) -> str:
        """Why, in words for the learner."""
        if self.reason in set(RegradeReason):
            words = RegradeReason(self.reason).words
        elif self.new_exercise_version and self.new_exercise_version != self.old_exercise_version:
            words = RegradeReason.EXERCISE_UPDATED.words
        else:
            words = RegradeReason.INSTRUCTOR_REQUEST.words
        return f"{words[:1].upper()}{words[1:]}" + (f": “{self.note}”" if self.note else "") + "."


class AuditEvent(Base):
    """Something a person did to scores or courses: who, when, what, and the values."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, index=True)
    actor_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"))
    action: Mapped[str] = mapped_column(String(64))
    course_id: Mapped[str | None] = mapped_column(ForeignKey("courses.id"), index=True)
    submission_id: Mapped[str | None] = mapped_column(ForeignKey("submissions.id"), index=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class IdempotencyKey(Base):
    """A client's `Idempotency-Key` and the submission the first request with it made.

    `owner` is who chose the key (an API key, "api-key:<id>"), so two clients' keys never meet;
    `request_sha256` fingerprints the request, so a reused key with another body is refused.
    """

    __tablename__ = "idempotency_keys"

    owner: Mapped[str] = mapped_column(String(80), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    # Set in the same transaction, right after the submission is made.
    submission_id: Mapped[str | None] = mapped_column(ForeignKey("submissions.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class OutboxStatus(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    # Given up: the receiver refused for good, or every attempt failed.
    FAILED = "failed"


class OutboxMessage(Base):
    """Something to tell another system (an LMS score, a webhook), written in the transaction
    of the change it reports and delivered by `app.outbox` with retries."""

    __tablename__ = "outbox"
    __table_args__ = (
        CheckConstraint("status IN ('pending', 'delivered', 'failed')", name="status_known"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=OutboxStatus.PENDING, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    # When it is next due; a delivery in progress pushes it out by its claim's timeout.
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, index=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)


class Draft(Base):
    """A signed-in learner's unsubmitted code for one exercise, in a course or in practice
    (`course_id` None): one row each, replaced as they type and when they submit."""

    __tablename__ = "drafts"
    __table_args__ = (
        UniqueConstraint("user_id", "course_id", "exercise_id"),
        # NULLs are distinct in a unique constraint: practice needs its own (partial) index.
        Index(
            "uq_drafts_practice",
            "user_id",
            "exercise_id",
            unique=True,
            sqlite_where=text("course_id IS NULL"),
            postgresql_where=text("course_id IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    course_id: Mapped[str | None] = mapped_column(ForeignKey("courses.id"))
    exercise_id: Mapped[str] = mapped_column(String(100))
    code: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class KeptSubmission(Base):
    """Code submitted from a page whose session had ended, kept for the browser that sent it
    (a cookie holds the token; only its SHA-256 is here) until it signs in and submits it."""

    __tablename__ = "kept_submissions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The exercise page it was sent to (its form's action), where it is put back.
    page_path: Mapped[str] = mapped_column(String(300))
    code: Mapped[str] = mapped_column(Text)
    # Who sent it (a session that ended is nobody's): at most a few are kept per address.
    client_address: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class ExerciseOpen(Base):
    """When a course's learner first opened one of its exercises: item analysis measures the
    time from here to the first solve. One row per learner and exercise, never updated."""

    __tablename__ = "exercise_opens"
    __table_args__ = (UniqueConstraint("course_id", "exercise_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    course_id: Mapped[str] = mapped_column(ForeignKey("courses.id"))
    exercise_id: Mapped[str] = mapped_column(String(100))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class DiagnosisReport(Base):
    """A learner's word that their submission's diagnosis looks wrong: it reaches the course's
    instructors with the submission, and is counted per diagnosis (where the grader errs)."""

    __tablename__ = "diagnosis_reports"
    __table_args__ = (UniqueConstraint("submission_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"))
    course_id: Mapped[str] = mapped_column(ForeignKey("courses.id"), index=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    # The diagnosis reported (a regrade may change the submission's since).
    diagnosis: Mapped[str] = mapped_column(String(64))
    note: Mapped[str] = mapped_column(Text, default="")
    reported_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class HintOpen(Base):
    """A hint a learner opened on a result: which diagnosis and level, from which submission."""

    __tablename__ = "hint_opens"
    __table_args__ = (
        Index("ix_hint_opens_course_exercise", "course_id", "exercise_id"),
        # A level opens once (migration 0025); practice's course is NULL, which a plain unique
        # index never counts as equal.
        Index(
            "uq_hint_opens_course_opening",
            "user_id",
            "course_id",
            "exercise_id",
            "diagnosis",
            "level",
            unique=True,
            sqlite_where=text("course_id IS NOT NULL"),
            postgresql_where=text("course_id IS NOT NULL"),
        ),
        Index(
            "uq_hint_opens_practice_opening",
            "user_id",
            "exercise_id",
            "diagnosis",
            "level",
            unique=True,
            sqlite_where=text("course_id IS NULL"),
            postgresql_where=text("course_id IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    # None for practice, which has no course.
    course_id: Mapped[str | None] = mapped_column(ForeignKey("courses.id"))
    exercise_id: Mapped[str] = mapped_column(String(100))
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"))
    diagnosis: Mapped[str] = mapped_column(String(64))
    level: Mapped[int] = mapped_column(Integer)  # from 1
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class Extension(Base):
    """One learner's own terms for one exercise of a course, given by an instructor: a later
    due date, more attempts, more minutes of a timed attempt. Each change is audited."""

    __tablename__ = "extensions"
    __table_args__ = (
        UniqueConstraint("course_id", "exercise_id", "user_id"),
        CheckConstraint("extra_attempts >= 0", name="extra_attempts"),
        CheckConstraint("extra_minutes >= 0", name="extra_minutes"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    course_id: Mapped[str] = mapped_column(ForeignKey("courses.id"))
    exercise_id: Mapped[str] = mapped_column(String(100))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # None: the course's
    extra_attempts: Mapped[int] = mapped_column(Integer, default=0)
    extra_minutes: Mapped[int] = mapped_column(Integer, default=0)
    granted_by_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"))
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
