"""The learner's API (`/api/v1/me`, personal tokens): request and response bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import SubmissionOut


class LearnerSubmissionCreate(BaseModel):
    """The learner's code for one exercise, in practice or in one of their courses."""

    model_config = ConfigDict(strict=True, extra="forbid")

    exercise: str = Field(description="Exercise id, as listed by `GET /api/v1/me/exercises`.")
    course: str | None = Field(
        default=None, description="A course id of yours; none: practice outside any course."
    )
    code: str = Field(description="Python source defining the exercise's entry point.")


SOLUTION_DESCRIPTION = (
    "The reference solution of {of} (Python source), once your course shows it: the course "
    "chose to, and the due date has passed, for you too when yours was extended. Null before "
    "that, in practice, and outside your courses: as the exercise page shows it."
)


class LearnerSubmissionOut(SubmissionOut):
    """Your submission and, once graded, its result with the charts the page shows."""

    course: str | None
    diagnosis_text: str | None = Field(description="The diagnosis in words, as the page says it.")
    by_token: bool = Field(description="Sent with a personal access token (a client).")
    page_url: str = Field(description="The submission's page, the same result in a browser.")
    events_url: str = Field(description="Its progress stream (text/event-stream).")
    notices: list[str]
    charts_svg: list[str] = Field(
        description="The loss and weight charts the page draws, as SVG (text escaped)."
    )
    solution: str | None = Field(
        default=None, description=SOLUTION_DESCRIPTION.format(of="its exercise")
    )


class ExerciseStateOut(BaseModel):
    """One exercise with your standing on it."""

    id: str
    title: str
    unit: str = Field(description="The unit it is listed under: the course's, else its own.")
    signature: str
    entry_point: str = Field(description="The name the graded function must have.")
    max_score: float
    state: str = Field(description="not-tried, tried or solved.")
    score: float | None = Field(description="What counts; null while nothing graded counts.")
    attempts: int
    due_at: datetime | None = Field(
        default=None, description="Your due date: the course's, or yours when it was extended."
    )
    due_extended: bool = Field(
        default=False, description="True when your instructor moved your due date."
    )
    max_attempts: int | None = Field(
        default=None,
        description="Submissions you may make (with any extra ones given to you); null: no "
        "limit. Beyond it a submission is refused with 403.",
    )
    time_limit_minutes: int | None = Field(
        default=None,
        description="A timed exercise: minutes from your first open of it (with any extra "
        "given to you); null: untimed. After it a submission is refused with 403.",
    )
    solution: str | None = Field(
        default=None, description=SOLUTION_DESCRIPTION.format(of="this exercise")
    )


class CourseExercisesOut(BaseModel):
    id: str
    name: str
    role: str
    exercises: list[ExerciseStateOut]


class LearnerExercisesOut(BaseModel):
    """Practice (outside any course) and each of your courses, with your state on each."""

    email: str
    practice: list[ExerciseStateOut]
    courses: list[CourseExercisesOut]


class PracticeKitOut(BaseModel):
    """What `loopgrade-client check` needs to run locally: which harness, the visible cases
    and the reference's records on them. Never a hidden case, never code."""

    exercise: str
    version: str
    kind: str
    entry_point: str
    harness_sha256: str = Field(
        description="The SHA-256 of the harness the cases are for. The client ships its own "
        "harness and checks only when it is this one: the server sends data, never code."
    )
    cases: list[dict[str, Any]] = Field(description="The visible cases' parameters.")
    reference: dict[str, Any] = Field(description="The reference's records, by case id.")


class PracticeTraceIn(BaseModel):
    """What the harness recorded on the visible cases on your computer (`loopgrade-client
    check`): its trace as it writes it, hostile data like a sandbox's."""

    model_config = ConfigDict(extra="forbid")

    trace: dict[str, Any]


class PracticeCheckResultOut(BaseModel):
    id: str
    passed: bool
    message: str


class PracticeCheckOut(BaseModel):
    """The server's words on the visible cases: the diagnosis, each check and the feedback a
    grading of those cases would give. Not a grade: the hidden cases are not in it, and
    nothing is stored."""

    exercise: str
    diagnosis: str
    diagnosis_text: str
    checks: list[PracticeCheckResultOut]
    feedback: str
