"""A regrade's dry run: what a regrade would change, graded for real and stored nowhere else.

Each submission a regrade would run gets a DryRunGrade row, which is its job record: the
same queue as grading takes it (in-process threads or Celery), as a job id with a prefix of
its own, and the worker grades the submission's code in the sandbox as a regrade would. The
new result is written on that row only: the submission, its outbox (LMS scores, webhooks)
and the learners see nothing. The request is audited.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

import graders
from app.audit import AuditAction, record_event
from app.courses.counted import Cell, score_cell
from app.courses.membership import AssignedExercise, extensions_of
from app.db import SessionFactory
from app.grading.jobs import LEARNER_KEY
from app.grading.regrades import submissions_to_regrade
from app.grading.submissions import queue_for_grading
from app.models import DryRunGrade, Submission, SubmissionStatus, User, new_id, utc_now
from app.settings import Settings
from graders.exercises import get_exercise
from sandbox import Limits, Runner, SandboxError

log = logging.getLogger(__name__)

# A dry run's job id on the grading queue, beside the submission ids.
JOB_PREFIX = "dry-run:"
# The dry run's page lists at most this many changed submissions and learners (the counts
# above it are of all of them).
MAX_ROWS_SHOWN = 500


def job_id(row_id: str) -> str:
    return f"{JOB_PREFIX}{row_id}"


def row_id_of(job: str) -> str | None:
    """The DryRunGrade id a job id names, or None for a submission's job."""
    return job[len(JOB_PREFIX) :] if job.startswith(JOB_PREFIX) else None


def request_dry_run(
    session: Session,
    *,
    course_id: str,
    exercise_id: str,
    only_outdated: bool,
    by: User,
) -> tuple[str, int]:
    """Queue a dry run of the regrade of an exercise in a course; returns the batch id and how
    many submissions it grades. The caller's commit sends them to the workers."""
    submissions = submissions_to_regrade(
        session, course_id=course_id, exercise_id=exercise_id, only_outdated=only_outdated
    )
    batch_id = new_id()
    rows = [
        DryRunGrade(
            id=new_id(), batch_id=batch_id, submission_id=submission.id, requested_by_id=by.id
        )
        for submission in submissions
    ]
    session.add_all(rows)
    session.flush()
    for row in rows:
        queue_for_grading(session, job_id(row.id))
    record_event(
        session,
        actor=by,
        action=AuditAction.REGRADE_DRY_RUN,
        course_id=course_id,
        exercise=exercise_id,
        batch_id=batch_id,
        submissions=len(rows),
        only_outdated=only_outdated,
        version=get_exercise(exercise_id).version,
    )
    session.flush()
    return batch_id, len(rows)


@dataclass(frozen=True)
class DryRunJob:
    row_id: str
    attempt: int
    exercise_id: str
    code: str
    learner_key: str | None


def _claim(session: Session, row_id: str, *, lease_seconds: float) -> DryRunJob | None:
    """Mark the row running under a lease, in one UPDATE; None if it is not claimable."""
    now = utc_now()
    claimable = or_(
        DryRunGrade.status == SubmissionStatus.QUEUED,
        and_(
            DryRunGrade.status == SubmissionStatus.RUNNING,
            DryRunGrade.lease_expires_at < now,
        ),
    )
    claimed = session.execute(
        update(DryRunGrade)
        .where(DryRunGrade.id == row_id, claimable)
        .values(
            status=SubmissionStatus.RUNNING,
            attempts=DryRunGrade.attempts + 1,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
        )
        .returning(DryRunGrade.attempts, DryRunGrade.submission_id)
        .execution_options(synchronize_session=False)
    ).one_or_none()
    if claimed is None:
        return None
    submission = session.execute(
        select(Submission.exercise_id, Submission.code, LEARNER_KEY.label("key")).where(
            Submission.id == claimed.submission_id
        )
    ).one_or_none()
    if submission is None:
        return None
    return DryRunJob(
        row_id, claimed.attempts, submission.exercise_id, submission.code, submission.key
    )


def _finish(session: Session, job: DryRunJob, **values: object) -> bool:
    """Store on the row what its grading found; False if another worker's claim took it."""
    stored = session.execute(
        update(DryRunGrade)
        .where(
            DryRunGrade.id == job.row_id,
            DryRunGrade.attempts == job.attempt,
            DryRunGrade.status == SubmissionStatus.RUNNING,
        )
        .values(lease_expires_at=None, **values)
        .returning(DryRunGrade.id)
        .execution_options(synchronize_session=False)
    ).one_or_none()
    return stored is not None


def run_dry_run_job(
    sessions: SessionFactory,
    row_id: str,
    settings: Settings,
    *,
    limits: Limits | None,
    runner: Runner | None,
) -> float | None:
    """Claim the row, grade its submission's code, store the result on the row only. Returns
    the seconds after which to send the job again (the sandbox failed), else None."""
    with sessions.begin() as session:
        job = _claim(session, row_id, lease_seconds=settings.lease_seconds)
    if job is None:
        log.info("dry run %s: not claimable (done or being graded), skipped", row_id)
        return None
    started = time.monotonic()
    try:
        report = graders.grade(job.exercise_id, job.code, limits, runner, job.learner_key)
    except SandboxError as exc:
        if job.attempt < settings.grading_max_attempts:
            log.warning("dry run %s: sandbox fault on attempt %d: %s", row_id, job.attempt, exc)
            with sessions.begin() as session:
                _finish(session, job, status=SubmissionStatus.QUEUED, queued_at=utc_now())
            return settings.retry_delay_seconds(job.attempt)
        report = None
    except Exception:
        log.exception("dry run %s: grading failed", row_id)
        report = None
    with sessions.begin() as session:
        if report is None:
            _finish(session, job, status=SubmissionStatus.ERROR, finished_at=utc_now())
        else:
            _finish(
                session,
                job,
                status=SubmissionStatus.GRADED,
                finished_at=utc_now(),
                new_score=report.score,
                new_max_score=report.max_score,
                new_diagnosis=report.diagnosis,
                new_exercise_version=report.exercise_version,
            )
    log.info("dry run %s: graded in %.2f s", row_id, time.monotonic() - started)
    return None


def requeue_dry_runs(session: Session, *, queued_before: datetime | None) -> list[str]:
    """The job ids of dry-run rows to send to the workers again: queued ones (before
    `queued_before`, whose message was likely lost; None: all) and those whose lease expired."""
    now = utc_now()
    waiting = DryRunGrade.status == SubmissionStatus.QUEUED
    if queued_before is not None:
        waiting = and_(waiting, DryRunGrade.queued_at < queued_before)
    expired = and_(
        DryRunGrade.status == SubmissionStatus.RUNNING, DryRunGrade.lease_expires_at < now
    )
    row_ids = session.scalars(
        update(DryRunGrade)
        .where(or_(waiting, expired))
        .values(status=SubmissionStatus.QUEUED, queued_at=now)
        .returning(DryRunGrade.id)
        .execution_options(synchronize_session=False)
    ).all()
    jobs = [job_id(row_id) for row_id in row_ids]
    for job in jobs:
        queue_for_grading(session, job)
    return jobs


@dataclass(frozen=True)
class LearnerChange:
    """A learner's counted score on the exercise now, and if the dry run's results counted."""

    learner: str
    before: Cell
    after: Cell


@dataclass(frozen=True)
class DryRunReport:
    batch_id: str
    exercise_id: str
    total: int
    finished: int
    errors: int
    changed: list[tuple[DryRunGrade, Submission]]  # at most MAX_ROWS_SHOWN
    changed_count: int
    learners: list[LearnerChange]  # whose counted score would change; at most MAX_ROWS_SHOWN
    learners_count: int

    @property
    def done(self) -> bool:
        return self.finished == self.total


def _with_new_result(submission: Submission, row: DryRunGrade) -> Submission:
    """A copy of the submission, never added to a session, carrying the dry run's result."""
    copy = Submission(**{c.key: getattr(submission, c.key) for c in Submission.__table__.columns})
    copy.status = row.status
    copy.score = row.new_score
    copy.max_score = row.new_max_score
    copy.diagnosis = row.new_diagnosis
    return copy


def _changed(row: DryRunGrade, submission: Submission) -> bool:
    return row.status == SubmissionStatus.GRADED and (row.new_score, row.new_diagnosis) != (
        submission.score,
        submission.diagnosis,
    )


def dry_run_report(
    session: Session, course_id: str, assigned: AssignedExercise, batch_id: str
) -> DryRunReport | None:
    """The dry run so far, or None when the course has no such dry run."""
    rows = session.execute(
        select(DryRunGrade, Submission)
        .join(Submission, Submission.id == DryRunGrade.submission_id)
        .where(DryRunGrade.batch_id == batch_id)
        .order_by(Submission.created_at)
    ).all()
    if not rows or any(s.course_id != course_id or s.exercise_id != assigned.id for _, s in rows):
        return None
    finished = [(r, s) for r, s in rows if r.finished_at is not None]
    changed = [(r, s) for r, s in finished if _changed(r, s)]
    new_by_submission = {s.id: r for r, s in changed}

    def learner_of(submission: Submission) -> str:
        return f"user:{submission.user_id}" if submission.user_id else f"api:{submission.learner}"

    affected = {learner_of(s) for _, s in changed}
    theirs: dict[str, list[Submission]] = {}
    if affected:
        for submission in session.scalars(
            select(Submission).where(
                Submission.course_id == course_id, Submission.exercise_id == assigned.id
            )
        ):
            if learner_of(submission) in affected:
                theirs.setdefault(learner_of(submission), []).append(submission)
    extensions = extensions_of(session, course_id)
    learners = []
    for mine in sorted(theirs.values(), key=lambda rows: rows[0].learner):
        theirs_assigned = replace(
            assigned, extension=extensions.get((mine[0].user_id or "", assigned.id))
        )
        after_rows = [
            _with_new_result(s, new_by_submission[s.id]) if s.id in new_by_submission else s
            for s in mine
        ]
        before = score_cell(theirs_assigned, mine)
        after = score_cell(theirs_assigned, after_rows)
        if (before.score, before.state) != (after.score, after.state):
            learners.append(LearnerChange(mine[0].learner, before, after))
    return DryRunReport(
        batch_id=batch_id,
        exercise_id=assigned.id,
        total=len(rows),
        finished=len(finished),
        errors=sum(1 for r, _ in finished if r.status == SubmissionStatus.ERROR),
        changed=changed[:MAX_ROWS_SHOWN],
        changed_count=len(changed),
        learners=learners[:MAX_ROWS_SHOWN],
        learners_count=len(learners),
    )
