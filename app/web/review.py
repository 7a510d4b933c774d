"""What an instructor sees of one submission besides its result: who, limits, history."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit import events
from app.grading.queue import grading_limits
from app.grading.regrades import regrades_of
from app.grading.results import failure_said
from app.models import DiagnosisReport, RegradeReason, Submission, User
from app.settings import Settings
from graders.exercises import UnknownExercise, get_exercise
from graders.grading import GRADING_LIMITS

# Which cap a diagnosis means the sandbox stopped the code at.
LIMIT_DIAGNOSES = {
    "timeout": "time (wall-clock or CPU)",
    "memory-limit": "memory",
    "output-limit": "output",
}


@dataclass(frozen=True)
class SandboxLimit:
    name: str
    value: str
    hit: bool


def sandbox_limits(settings: Settings, submission: Submission) -> list[SandboxLimit]:
    """The caps each sandbox run had (as configured now), and which one this submission hit."""
    limits = grading_limits(settings) or GRADING_LIMITS
    hit = LIMIT_DIAGNOSES.get(submission.diagnosis or "")
    runs_message = failure_said(submission)
    return [
        SandboxLimit(
            "time (wall-clock or CPU)",
            f"{limits.wall_timeout_seconds:g} s wall, {limits.cpu_seconds:g} s CPU",
            hit == "time (wall-clock or CPU)",
        ),
        SandboxLimit("memory", f"{limits.memory_bytes // 2**20} MiB", hit == "memory"),
        SandboxLimit("output", f"{limits.output_bytes // 1024} KiB", hit == "output"),
        SandboxLimit("processes", str(limits.max_processes), "processes" in runs_message.lower()),
        SandboxLimit(
            "file size",
            f"{limits.file_size_bytes // 2**20} MiB",
            "file larger" in runs_message.lower(),
        ),
    ]


def review_context(session: Session, settings: Settings, submission: Submission) -> dict[str, Any]:
    try:
        current_version: str | None = get_exercise(submission.exercise_id).version
    except UnknownExercise:
        current_version = None
    learner = session.get(User, submission.user_id) if submission.user_id else None
    overridden_by = (
        session.get(User, submission.override_by_id) if submission.override_by_id else None
    )
    return {
        "learner": learner,
        "limits": sandbox_limits(settings, submission),
        "limit_hit": any(limit.hit for limit in sandbox_limits(settings, submission)),
        "regrades": regrades_of(session, submission.id),
        "regrade_reasons": list(RegradeReason),
        "events": events(session, submission_id=submission.id),
        "current_version": current_version,
        "outdated": current_version is not None and submission.exercise_version != current_version,
        "overridden_by": overridden_by,
    }


# The course's submissions page lists at most this many (the newest).
MAX_LISTED_SUBMISSIONS = 500


@dataclass(frozen=True)
class SubmissionFilter:
    """Which of a course's submissions an instructor is going through, newest first."""

    exercise: str = ""
    diagnosis: str = ""
    learner: str = ""
    reported: str = ""  # "1": only those whose learner reported the diagnosis as wrong

    def query_string(self) -> str:
        """The filter as the list page's query (kept by the submission pages it links to).
        Every key is in it, so that even the unfiltered list's query is not empty."""
        return urlencode(asdict(self))

    @classmethod
    def from_query_string(cls, text: str) -> SubmissionFilter:
        values = {k: v[0] for k, v in parse_qs(text).items() if k in cls.__dataclass_fields__}
        return cls(**values)


def filtered_submissions(
    session: Session, course_id: str, chosen: SubmissionFilter
) -> list[tuple[Submission, User | None]]:
    query = select(Submission, User).outerjoin(User, User.id == Submission.user_id)
    query = query.where(Submission.course_id == course_id)
    if chosen.exercise:
        query = query.where(Submission.exercise_id == chosen.exercise)
    if chosen.diagnosis:
        query = query.where(Submission.diagnosis == chosen.diagnosis)
    if chosen.learner:
        query = query.where(Submission.learner == chosen.learner)
    if chosen.reported:
        reported = select(DiagnosisReport.submission_id).where(
            DiagnosisReport.course_id == course_id
        )
        query = query.where(Submission.id.in_(reported))
    query = query.order_by(Submission.created_at.desc(), Submission.id)
    return [(s, u) for s, u in session.execute(query.limit(MAX_LISTED_SUBMISSIONS)).all()]


def diagnosis_counts(session: Session, course_id: str, exercise: str) -> list[tuple[str, int]]:
    """Each diagnosis among the course's submissions (of one exercise, if given), most first."""
    query = select(Submission.diagnosis, func.count()).where(
        Submission.course_id == course_id, Submission.diagnosis.is_not(None)
    )
    if exercise:
        query = query.where(Submission.exercise_id == exercise)
    rows = session.execute(query.group_by(Submission.diagnosis)).all()
    return sorted(((code, count) for code, count in rows if code), key=lambda r: (-r[1], r[0]))


@dataclass(frozen=True)
class ReviewPosition:
    """Where a submission is in the list an instructor came from, and its neighbours."""

    index: int  # from 1
    total: int
    newer_id: str | None
    older_id: str | None
    list_query: str


def review_position(
    session: Session, submission: Submission, list_query: str
) -> ReviewPosition | None:
    if submission.course_id is None or not list_query:
        return None
    chosen = SubmissionFilter.from_query_string(list_query)
    ids = [s.id for s, _ in filtered_submissions(session, submission.course_id, chosen)]
    if submission.id not in ids:
        return None
    at = ids.index(submission.id)
    return ReviewPosition(
        index=at + 1,
        total=len(ids),
        newer_id=ids[at - 1] if at > 0 else None,
        older_id=ids[at + 1] if at + 1 < len(ids) else None,
        list_query=chosen.query_string(),
    )
