"""What an instructor sees of one submission besides its result: who, limits, history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.courses.audit import events
from app.grading.queue import grading_limits
from app.grading.regrades import regrades_of
from app.models import Submission, User
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
    runs_message = next(
        (c.get("message", "") for c in submission.checks or [] if c.get("id") == "runs"), ""
    )
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
        "events": events(session, submission_id=submission.id),
        "current_version": current_version,
        "outdated": current_version is not None and submission.exercise_version != current_version,
        "overridden_by": overridden_by,
    }
