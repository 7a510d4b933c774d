"""The REST API's request and response bodies."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.courses.counted import CountedAs
from app.models import SubmissionStatus


class SubmissionCreate(BaseModel):
    """A learner's code for one exercise."""

    # Strict: a number where a string belongs is a client bug worth reporting, not coercing.
    model_config = ConfigDict(strict=True, extra="forbid")

    exercise: str = Field(description="Exercise id, as listed by `GET /api/v1/exercises`.")
    learner: str = Field(description="The learner's id in your system (max 255 characters).")
    code: str = Field(description="Python source defining the exercise's entry point.")


class CheckOut(BaseModel):
    """One graded property of a submission. Hidden checks never reveal their case's data."""

    id: str
    passed: bool
    points: float
    max_points: float
    message: str
    hidden: bool = False


class SubmissionAccepted(BaseModel):
    """The submission is stored and queued; poll the `Location` header's URL for the result."""

    id: str
    status: SubmissionStatus
    notices: list[str] = Field(
        default=[], description="What was left out of an uploaded notebook, and why."
    )


class SubmissionOut(BaseModel):
    """A submission and, once `status` is `graded`, its result."""

    id: str
    exercise: str
    learner: str
    status: SubmissionStatus
    score: float | None = Field(description="Null until graded.")
    max_score: float | None
    counted_score: float | None = Field(
        description="What this submission counts under its course's policy: its override, or "
        "its score after any late penalty (0 when locked). The learner's counted score for the "
        "exercise is the best (or latest) of these. Null until graded."
    )
    counted_as: CountedAs | None = Field(
        description="Why it counts that: graded, late, locked or overridden."
    )
    counted_because: str | None = Field(
        description="The same in words, as the learner reads it; null when it counts as graded."
    )
    # Not the grader's Literal: a stored result must stay readable if a code is ever retired.
    diagnosis: str | None = Field(description="A stable code naming the mistake.")
    checks: list[CheckOut]
    feedback: str | None = Field(description="Markdown, in the words of the lesson.")
    hint_count: int = Field(
        default=0,
        description="How many hints the learner may open for this diagnosis in its course "
        "(0 when none: a correct answer, a code without hints). Only the first is here; the "
        "others open one at a time on the learner's page.",
    )
    first_hint: str | None = Field(
        default=None, description="The first hint (where to look), Markdown; null when none."
    )
    created_at: datetime
    graded_at: datetime | None


class ExerciseOut(BaseModel):
    """An exercise a submission can name."""

    id: str
    title: str
    unit: str = Field(description="The unit it is listed under (exercise.toml's `unit`).")
    signature: str
    max_score: float
    version: str = Field(description="Content hash: changes whenever the exercise does.")


class ErrorOut(BaseModel):
    """Every error answer: a message or, for validation errors, a list of them."""

    detail: str | list[dict[str, object]]
    line: int | None = Field(
        default=None,
        description="For code that does not compile (422): the line of the syntax error. "
        "Such code is not stored, graded or counted as an attempt.",
    )
