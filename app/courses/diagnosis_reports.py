"""A learner's word that a diagnosis looks wrong: kept with the submission for the course's
instructors, and counted per diagnosis on the statistics (where the grader errs most).

One report per submission, made by the learner whose submission it is; sending it again
replaces the note. Practice has no instructor to read it: course submissions only.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.errors import AppError
from app.models import DiagnosisReport, Submission, SubmissionStatus, User, utc_now

MAX_NOTE_CHARS = 1000


class ReportRejected(AppError, ValueError):
    """The report cannot be taken; the message says why."""

    status_code = 422
    title = "Not sent"


def report_diagnosis(
    session: Session, submission: Submission, *, by: User, note: str
) -> DiagnosisReport:
    note = note.strip()
    if submission.user_id != by.id:
        raise ReportRejected("only the learner who submitted this code can report its diagnosis")
    if submission.course_id is None:
        raise ReportRejected("practice has no instructor to tell: submit it in your course")
    if submission.status != SubmissionStatus.GRADED or submission.diagnosis is None:
        raise ReportRejected("this submission has no diagnosis yet: wait until it is graded")
    if len(note) > MAX_NOTE_CHARS:
        raise ReportRejected(f"the note may have at most {MAX_NOTE_CHARS} characters")
    report = report_of(session, submission.id)
    if report is None:
        report = DiagnosisReport(
            submission_id=submission.id, course_id=submission.course_id, user_id=by.id
        )
        session.add(report)
    report.diagnosis = submission.diagnosis
    report.note = note
    report.reported_at = utc_now()
    session.flush()
    return report


def report_of(session: Session, submission_id: str) -> DiagnosisReport | None:
    return session.scalar(
        select(DiagnosisReport).where(DiagnosisReport.submission_id == submission_id)
    )


def reported_counts(session: Session, course_id: str, exercise_id: str) -> dict[str, int]:
    """Reports per diagnosis reported, for one exercise of a course."""
    rows = session.execute(
        select(DiagnosisReport.diagnosis, func.count())
        .join(Submission, Submission.id == DiagnosisReport.submission_id)
        .where(DiagnosisReport.course_id == course_id, Submission.exercise_id == exercise_id)
        .group_by(DiagnosisReport.diagnosis)
    )
    return {code: count for code, count in rows}


def reported_submission_ids(session: Session, course_id: str) -> set[str]:
    return set(
        session.scalars(
            select(DiagnosisReport.submission_id).where(DiagnosisReport.course_id == course_id)
        )
    )
