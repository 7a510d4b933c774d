"""The grader's verdict on one submission: what the API returns and the database keeps."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from graders.diagnoses import UnknownDiagnosis, declared, registry
from graders.sentences import Said


def _declared_code(code: str) -> str:
    """A code some module declares (graders.diagnoses); a typo is refused where it is made."""
    try:
        declared(code)
    except UnknownDiagnosis as exc:
        raise ValueError(str(exc)) from None
    return code


# A diagnosis code: one of those declared with the modules that produce them (graders.diagnoses,
# docs/exercises.md lists them).
Diagnosis = Annotated[str, AfterValidator(_declared_code)]


def diagnosis_name(code: str) -> str:
    """The words for a diagnosis code; a code this version does not know is shown as it is."""
    record = registry().get(code)
    return code if record is None else record.name


class Check(BaseModel):
    """One graded property of the submission, with the points it earned."""

    id: str
    passed: bool
    points: float
    max_points: float
    message: str
    hidden: bool = False
    # The sentence said, its key and values (graders.sentences): the message is made from it
    # when the grade is read; None for a message stored as text (older grades, plain texts).
    said: Said | None = None


class PlotSeries(BaseModel):
    """Per-step values of one visible case, for the learner's chart.

    At most MAX_PLOT_POINTS points whatever the trace's length (`judging.plot_series`):
    `steps` says which step (from 1) each point is; empty in reports made before it existed,
    meaning 1, 2, 3, ...

    `fixed`: the learner's loop replayed with only its named mistake fixed, at the same steps
    (`graders.fix_replay`), and `fixed_label` says which fix; empty when none is drawn.
    """

    case: str
    label: str
    learner: list[float | None]
    reference: list[float | None]
    steps: list[int] = Field(default_factory=list)
    fixed: list[float | None] = Field(default_factory=list)
    fixed_label: str = ""


MAX_PLOT_POINTS = 300


class GradeReport(BaseModel):
    """The score, the named mistake and the explanation for one submission."""

    exercise: str
    exercise_version: str = Field(description="Content hash of the exercise graded against.")
    score: float
    max_score: float
    diagnosis: Diagnosis
    other_diagnoses: list[Diagnosis] = Field(
        default=[], description="Other diagnoses that fit the numbers and the calls as well."
    )
    checks: list[Check]
    feedback: str = Field(description="Markdown explanation in the words of the lesson.")
    facts: str = Field(
        default="",
        description="What the grader found in this submission, in numbers (what a fitted "
        "model showed, a failed run's error): the feedback is these facts with the words of the "
        "diagnosis and of the claims, rendered when read.",
    )
    facts_said: list[Said] = Field(
        default=[],
        description="The facts as the grader's sentences said them, keys and values "
        "(graders.sentences): the facts are worded from them when read; empty when the facts "
        "are no sentence of the grader's (a failed run's error).",
    )
    claims: list[str] = Field(
        default=[],
        description="What else is said, by key: the claims that held (graders.claims), a "
        "second mistake (`second:CODE`), another diagnosis that fits (`other:CODE`), the "
        "first failing check when no diagnosis explains it (`check:ID`).",
    )
    plots: list[PlotSeries] = []
    output: str = Field(default="", description="What the code printed in the visible cases.")
