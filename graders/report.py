"""The grader's verdict on one submission: what the API returns and the database keeps."""

from __future__ import annotations

from typing import Literal, cast

from pydantic import BaseModel, Field

Diagnosis = Literal[
    "correct",
    "missing-zero-grad",
    "step-before-backward",
    "zero-grad-before-step",
    "missing-step",
    "missing-backward",
    "loss-detached",
    "grad-none-error",
    "wrong-loss-scaling",
    "step-per-microbatch",
    "zero-grad-inside-accumulation",
    "backward-twice",
    "step-twice",
    "step-skipped",
    "zero-grad-skipped",
    "gradients-scaled",
    "loss-sum-not-mean",
    "wrong-learning-rate",
    "wrong-momentum",
    "optimizer-recreated",
    "gradients-times-loss",
    "loss-after-update",
    "returns-live-gradient",
    "cleared-between-passes",
    "wrong-number-of-passes",
    "missing-abs",
    "modifies-gradients",
    "missing-clip",
    "clip-after-step",
    "clip-by-value",
    "scheduler-per-batch",
    "scheduler-before-optimizer",
    "scheduler-never",
    "missing-eval",
    "gradients-in-evaluation",
    "missing-no-grad",
    "left-in-eval-mode",
    "optimizer-state-lost",
    "model-not-restored",
    "syntax-error",
    "missing-function",
    "wrong-return-type",
    "runtime-error",
    "timeout",
    "memory-limit",
    "output-limit",
    "non-finite-value",
    "not-started",
    "incorrect",
]

# What a learner or instructor reads for each code, everywhere a page shows a diagnosis (the API
# returns the codes). docs/exercises.md says what each one means.
DIAGNOSIS_NAMES: dict[Diagnosis, str] = {
    "correct": "Correct",
    "missing-zero-grad": "Gradients not cleared before backward",
    "step-before-backward": "Step before backward",
    "zero-grad-before-step": "Cleared before the step",
    "missing-step": "No optimizer step",
    "missing-backward": "No backward pass",
    "loss-detached": "Loss cut off from the model",
    "grad-none-error": "Gradient is None",
    "wrong-loss-scaling": "Loss not divided by micro-batches",
    "step-per-microbatch": "Step per micro-batch",
    "zero-grad-inside-accumulation": "Cleared inside accumulation",
    "backward-twice": "Backward run twice",
    "step-twice": "Step run twice",
    "step-skipped": "Step skipped",
    "zero-grad-skipped": "Clearing skipped",
    "gradients-scaled": "Gradients scaled",
    "loss-sum-not-mean": "Summed loss, not mean",
    "wrong-learning-rate": "Wrong learning rate",
    "wrong-momentum": "Momentum missing",
    "optimizer-recreated": "Optimizer made anew",
    "gradients-times-loss": "Gradients multiplied by the loss",
    "loss-after-update": "Loss taken after the update",
    "returns-live-gradient": "Returned the live gradient",
    "cleared-between-passes": "Cleared between passes",
    "wrong-number-of-passes": "Wrong number of passes",
    "missing-abs": "Absolute value missing",
    "modifies-gradients": "Gradients modified",
    "missing-clip": "Gradients not clipped before the step",
    "clip-after-step": "Clipped after the step",
    "clip-by-value": "Clipped by value, not by norm",
    "scheduler-per-batch": "Scheduler stepped every batch",
    "scheduler-before-optimizer": "Scheduler stepped before the optimizer",
    "scheduler-never": "Scheduler never stepped",
    "missing-eval": "Evaluated in training mode",
    "gradients-in-evaluation": "Trained while evaluating",
    "missing-no-grad": "Graph recorded while evaluating",
    "left-in-eval-mode": "Left in evaluation mode",
    "optimizer-state-lost": "Optimizer state not restored",
    "model-not-restored": "Model weights not restored",
    "syntax-error": "Syntax error",
    "missing-function": "Function not found",
    "wrong-return-type": "Wrong return type",
    "runtime-error": "Error while running",
    "timeout": "Time limit reached",
    "memory-limit": "Memory limit reached",
    "output-limit": "Output limit reached",
    "non-finite-value": "Training blew up",
    "not-started": "Not started",
    "incorrect": "Incorrect",
}


def diagnosis_name(code: str) -> str:
    """The words for a diagnosis code; a code this version does not know is shown as it is."""
    return DIAGNOSIS_NAMES.get(cast(Diagnosis, code), code)


class Check(BaseModel):
    """One graded property of the submission, with the points it earned."""

    id: str
    passed: bool
    points: float
    max_points: float
    message: str
    hidden: bool = False


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
    plots: list[PlotSeries] = []
    output: str = Field(default="", description="What the code printed in the visible cases.")
