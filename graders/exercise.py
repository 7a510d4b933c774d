"""What an exercise is: its cases, its known buggy loops, and what the learner sees and the
grader checks. Reading them from `exercises/` is `graders.exercises`, above the kinds.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from graders.optimizers import OptimizerFields
from graders.report import Diagnosis

# Bounds on an exercise's cases. The hidden ones reach the harness as one later input, which a
# pipe holds whole (sandbox.supervise.LATER_INPUT_MAX_BYTES): so many cases at their largest
# fit in it with room to spare (tests/graders/test_unit.py), and an exercise cannot be loaded
# that would fail every grading.
MAX_CASES = 32  # the built-in exercises have 5 at most
MAX_CASE_ID_CHARS = 48


# The most parameters a declared model may have: those of the largest linear one (64 x 64 and a
# bias), so that a case's records stay within what a trace may carry.
MAX_MODEL_PARAMETERS = 64 * 64 + 64


class ModelSpec(BaseModel):
    """A case's model: `linear` (one `nn.Linear`), or `mlp`, an `nn.Sequential` of `Linear`
    layers through the `hidden` widths with the activation between them, and after each
    activation an `nn.Dropout(dropout)` when it has one. Its parameters are named as
    `named_parameters()` names them (`weight`, or `0.weight`, `2.bias`; `3.weight` after a
    dropout layer)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["linear", "mlp"] = "linear"
    hidden: tuple[int, ...] = Field(default=(), max_length=2, description="Hidden widths.")
    activation: Literal["relu", "tanh", "sigmoid"] | None = Field(
        default=None, description="An mlp's, between its layers; relu when not given."
    )
    # Read only by the kinds whose judging survives random masks (`evaluation`: evaluation
    # mode turns it off); any other kind refuses it (graders.exercises.configuration_problem).
    dropout: float | None = Field(
        default=None, gt=0, lt=1, description="An mlp's dropout after each activation."
    )

    @model_validator(mode="after")
    def _fits_its_kind(self) -> Self:
        if self.kind == "linear" and (
            self.hidden or self.activation is not None or self.dropout is not None
        ):
            raise ValueError(
                "a linear model has no hidden layers, activation nor dropout: remove them"
            )
        if self.kind == "mlp" and not self.hidden:
            raise ValueError("an mlp needs hidden widths, e.g. hidden = [8]")
        if not all(1 <= width <= 64 for width in self.hidden):
            raise ValueError("each hidden width must be from 1 to 64")
        return self


class CaseSpec(OptimizerFields):
    """One fixed-seed problem; `hidden` cases show the learner only the check and its message.

    Its optimizer and the optimizer's settings are the fields of `OptimizerFields`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=MAX_CASE_ID_CHARS)
    seed: int = Field(ge=0, lt=2**32)
    in_features: int = Field(ge=1, le=64)
    out_features: int = Field(ge=1, le=64)
    batch_size: int = Field(ge=1, le=256)
    steps: int = Field(ge=1, le=50, description="Calls of the function, or batches per epoch.")
    stale_grads: bool = False
    micro_batches: int = Field(default=0, ge=0, le=16, description="Micro-batches per call.")
    epochs: int = Field(default=0, ge=0, le=20, description="Epochs, for whole-loop cases.")
    max_norm: float | None = Field(
        default=None, gt=0, description="Passed to the function as its last argument."
    )
    grad_state: Literal["present", "none", "zeros", "mixed"] = "present"
    # The `evaluation` kind's model: Linear, BatchNorm1d, ReLU, Dropout(p), Linear.
    hidden_features: int = Field(default=8, ge=1, le=64, description="Width of the hidden layer.")
    dropout: float = Field(default=0.5, gt=0, lt=1, description="The dropout layer's p.")
    # The `epoch-loop` kind's scheduler: StepLR(optimizer, lr_step_size, lr_gamma).
    lr_step_size: int = Field(default=1, ge=1, le=20, description="Epochs per decay.")
    lr_gamma: float = Field(default=0.5, gt=0, lt=1, description="The decay of each step.")
    # The model, its loss and the targets (`graders.harness.build_case`): mse on real-valued
    # targets, or cross-entropy on integer classes (out_features of them).
    model: ModelSpec = ModelSpec()
    loss: Literal["mse", "cross-entropy"] = "mse"
    # The whole-loop kinds over a dataset (`dataloader-epoch`): so many examples, in batches of
    # `batch_size`, the last one short when it does not divide them.
    examples: int = Field(default=0, ge=0, le=1024, description="Examples in the dataset.")
    # The `mixed-precision-step` kind: the GradScaler's first scale (past float32's range, about
    # 2**128, a scaled gradient overflows and the scaler skips the step).
    loss_scale: float = Field(default=1024.0, gt=0, le=2.0**127, description="The first scale.")
    # The `patience-fit` kind: epochs in a row without improvement before the fit stops.
    patience: int = Field(default=1, ge=1, le=20, description="Epochs without improvement.")
    hidden: bool = False

    @model_validator(mode="after")
    def _model_fits(self) -> Self:
        widths = [self.in_features, *self.model.hidden, self.out_features]
        parameters = sum((a + 1) * b for a, b in itertools.pairwise(widths))
        if parameters > MAX_MODEL_PARAMETERS:
            raise ValueError(
                f"model: {parameters} parameters, more than the {MAX_MODEL_PARAMETERS} a case "
                "may have: make the layers narrower"
            )
        if self.loss == "cross-entropy" and self.out_features < 2:
            raise ValueError("loss: cross-entropy needs out_features (the classes) of at least 2")
        return self

    @property
    def values_per_example(self) -> int:
        """The loss's terms per example: one per output for mse, one for cross-entropy."""
        return self.out_features if self.loss == "mse" else 1

    def harness_spec(self) -> dict[str, Any]:
        """What the harness needs to build the case; whether it is hidden is not its business.

        The settings the harness reads with their defaults (`OMITTED_AT_DEFAULT`) are left out
        when at them: the hidden cases' later input stays within what a pipe holds."""
        spec = self.model_dump(exclude={"hidden"})
        for name in OMITTED_AT_DEFAULT:
            if getattr(self, name) == type(self).model_fields[name].default:
                del spec[name]
        return spec


# Read by the harness with their defaults when absent (`spec.get`): a case at the default
# carries none of them.
OMITTED_AT_DEFAULT = ("model", "loss", "examples", "patience", "loss_scale")


# The case settings only some kinds read (each kind names its own: ExerciseKind.case_settings);
# the others (the model's shape, the data, the optimizer, stale_grads, hidden) every kind reads.
KIND_SETTINGS = frozenset(
    {
        "micro_batches", "epochs", "max_norm", "grad_state", "hidden_features", "dropout",
        "lr_step_size", "lr_gamma", "model", "loss", "examples", "patience", "loss_scale",
        # Not a key of its own: the model's dropout (`model.dropout`), read by fewer kinds than
        # the model is.
        "model.dropout",
    }
)  # fmt: skip


class Variant(BaseModel):
    """A known buggy loop, the diagnosis it must get, and the call order one step of it makes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    file: str
    diagnosis: Diagnosis
    calls: list[str] = Field(default_factory=list)
    note: str = Field(default="", description="Said to a learner whose code behaves like this.")
    source: str


MAX_UNIT_CHARS = 80
MAX_CORRECT_CHARS = 600


class Exercise(BaseModel):
    """Everything about one exercise: what the learner sees and what the grader checks."""

    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    position: int = Field(description="Place in the course's default order, from 1.")
    unit: str = Field(
        default="", max_length=MAX_UNIT_CHARS, description="The unit it is listed under."
    )
    correct: str = Field(
        default="",
        max_length=MAX_CORRECT_CHARS,
        description="What a learner whose every check passed is told their code does "
        "(check-exercises requires it).",
    )
    case_seeds: Literal["fixed", "per-learner"] = Field(
        default="fixed",
        description="per-learner: each learner's visible cases get seeds of their own "
        "(for_learner); hidden cases stay as declared.",
    )
    kind: str = Field(description="A kind registered in graders.kinds.KINDS.")
    entry_point: str
    signature: str
    prompt_markdown: str
    starter_code: str
    solution_code: str
    checks: dict[str, float]
    cases: list[CaseSpec] = Field(min_length=1, max_length=MAX_CASES)
    variants: list[Variant]
    version: str = Field(
        description="Content hash of the folder and of the grader code that judges it."
    )
    folder: str = Field(default="", description="Where it was read from, for messages.")
    solution_file: str = "solution.py"
    learner_variant: str = Field(
        default="", description="Set by for_learner: which learner's seeds the cases carry."
    )

    @property
    def max_score(self) -> float:
        return sum(self.checks.values())


def for_learner(exercise: Exercise, learner_key: str | None) -> Exercise:
    """The exercise as this learner is graded on it: with `case_seeds = "per-learner"`, each
    visible case's seed is drawn from (exercise, learner, case), so two learners see different
    numbers and one learner the same ones every time (a regrade included). Hidden cases, and
    every case of a fixed exercise or of an anonymous learner (None), stay as declared.

    The version is unchanged (it says which files judged the result); `learner_variant` tells
    the grader's caches one learner's cases from another's.
    """
    if exercise.case_seeds == "fixed" or learner_key is None:
        return exercise
    cases = [
        case
        if case.hidden
        else case.model_copy(update={"seed": variant_seed(exercise.id, learner_key, case.id)})
        for case in exercise.cases
    ]
    variant = hashlib.sha256(f"{exercise.id}\0{learner_key}".encode()).hexdigest()[:16]
    return exercise.model_copy(update={"cases": cases, "learner_variant": variant})


def variant_seed(exercise_id: str, learner_key: str, case_id: str) -> int:
    """A case seed drawn from (exercise, learner, case): stable, and in CaseSpec's range."""
    digest = hashlib.sha256(f"case-seed\0{exercise_id}\0{learner_key}\0{case_id}".encode())
    return int.from_bytes(digest.digest()[:8], "big") % 2**32
