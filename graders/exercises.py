"""Exercises as data: one folder each under `exercises/`, read from `exercise.toml`.

A folder whose configuration is wrong (a check, kind or diagnosis code the grader does not
know, a missing field) is refused when exercises load, with a one-line reason that names the
file, the field and what to do; the other folders still load (`refused_exercises`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import json
import logging
import os
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from graders.optimizers import OptimizerFields
from graders.report import Diagnosis
from graders.syntax import parse_module

EXERCISES_DIR = Path(
    os.environ.get("LOOPGRADE_EXERCISES_DIR", Path(__file__).resolve().parent.parent / "exercises")
)


# Bounds on an exercise's cases. The hidden ones reach the harness as one later input, which a
# pipe holds whole (sandbox.supervise.LATER_INPUT_MAX_BYTES): so many cases at their largest
# fit in it with room to spare (tests/graders/test_unit.py), and an exercise cannot be loaded
# that would fail every grading.
MAX_CASES = 32  # the built-in exercises have 5 at most
MAX_CASE_ID_CHARS = 48


log = logging.getLogger(__name__)


class UnknownExercise(KeyError):
    """No exercise has this id."""


# The most parameters a declared model may have: those of the largest linear one (64 x 64 and a
# bias), so that a case's records stay within what a trace may carry.
MAX_MODEL_PARAMETERS = 64 * 64 + 64


class ModelSpec(BaseModel):
    """A case's model: `linear` (one `nn.Linear`), or `mlp`, an `nn.Sequential` of `Linear`
    layers through the `hidden` widths with the activation between them. Its parameters are
    named as `named_parameters()` names them (`weight`, or `0.weight`, `2.bias`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["linear", "mlp"] = "linear"
    hidden: tuple[int, ...] = Field(default=(), max_length=2, description="Hidden widths.")
    activation: Literal["relu", "tanh", "sigmoid"] | None = Field(
        default=None, description="An mlp's, between its layers; relu when not given."
    )

    @model_validator(mode="after")
    def _fits_its_kind(self) -> Self:
        if self.kind == "linear" and (self.hidden or self.activation is not None):
            raise ValueError("a linear model has no hidden layers nor activation: remove them")
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


def _judged_toml(content: bytes) -> bytes:
    """exercise.toml without `correct`, the sentence a correct answer is told (rendered when
    read): its other keys, sorted. A file that does not parse is hashed as it is."""
    try:
        config = tomllib.loads(content.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return content
    config.pop("correct", None)
    return json.dumps(config, sort_keys=True, default=str).encode()


def _content_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    # hints.toml is left out: hints never change a grade, so a new hint must not mark the
    # results graded before for regrade (graders/hints.py).
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "hints.toml"):
        content = path.read_bytes()
        if path == folder / "exercise.toml":
            content = _judged_toml(content)
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + content + b"\0")
    return digest.hexdigest()[:16]


class ExerciseRefused(ValueError):
    """An exercise folder that cannot be graded as configured; the message is one line."""


def _one_line(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()
    )


# Every key exercise.toml may have (docs/authoring.md): any other is refused, not ignored, as
# a setting the grader would silently not apply.
TOML_KEYS = frozenset(
    {
        "id", "title", "position", "kind", "entry_point", "signature", "prompt", "starter",
        "solution", "checks", "cases", "variants", "unit", "correct", "case_seeds",
    }
)  # fmt: skip


def load_exercise(folder: Path) -> Exercise:
    """Read one exercise folder; raises ExerciseRefused naming the file and field that is
    wrong and what to do."""
    toml = folder / "exercise.toml"
    try:
        config = tomllib.loads(toml.read_text())
        unknown = sorted(set(config) - TOML_KEYS)
        if unknown:
            raise ExerciseRefused(
                f"{toml}: {', '.join(map(repr, unknown))}: no such key, and the grader would "
                "not apply it: remove it (the keys are in docs/authoring.md)"
            )
        exercise = Exercise.model_validate(
            {
                "id": config["id"],
                "title": config["title"],
                "position": config["position"],
                "unit": config.get("unit", ""),
                "correct": config.get("correct", ""),
                "case_seeds": config.get("case_seeds", "fixed"),
                "kind": config["kind"],
                "entry_point": config["entry_point"],
                "signature": config["signature"],
                "prompt_markdown": (folder / config.get("prompt", "prompt.md")).read_text(),
                "starter_code": (folder / config.get("starter", "starter.py")).read_text(),
                "solution_code": (folder / config.get("solution", "solution.py")).read_text(),
                "checks": config["checks"],
                "cases": config["cases"],
                "variants": [
                    {**variant, "source": (folder / variant["file"]).read_text()}
                    for variant in config.get("variants", [])
                ],
                "version": _content_hash(folder),
                "folder": str(folder),
                "solution_file": config.get("solution", "solution.py"),
            }
        )
    except ExerciseRefused:
        raise
    except ValidationError as exc:
        raise ExerciseRefused(f"{toml}: {_one_line(exc)} (see docs/authoring.md)") from exc
    except KeyError as exc:
        raise ExerciseRefused(f"{toml}: the field {exc} is missing: add it") from exc
    except (OSError, ValueError) as exc:
        raise ExerciseRefused(f"{toml}: {exc}".replace("\n", " ")) from exc
    problem = configuration_problem(exercise)
    if problem is not None:
        raise ExerciseRefused(f"{toml}: {problem}")
    return exercise.model_copy(update={"version": _judged_version(exercise)})


# The shared modules of graders/ that judge every exercise, with the kind's own module: all of
# graders/*.py but these, which cannot change a stored grade or report (the command line, the
# new-folder scaffold, reading an upload into code, hints, and check-exercises' proof).
GRADERS_DIR = Path(__file__).resolve().parent
NOT_JUDGING = frozenset(
    {"__main__.py", "cli.py", "scaffold.py", "notebook.py", "hints.py", "proving.py", "mutation.py"}
)


def _judged_version(exercise: Exercise) -> str:
    """The folder's hash with the source of the grader code that judges it (its kind's module and
    the shared judging modules): a change of any makes a new version, so results graded before
    are marked for regrade."""
    from graders.kinds import kind_of

    module = sys.modules[kind_of(exercise).record.__module__]
    shared = sorted(p for p in GRADERS_DIR.glob("*.py") if p.name not in NOT_JUDGING)
    digest = hashlib.sha256(exercise.version.encode() + b"\0")
    for path in [Path(str(module.__file__)), *shared]:
        digest.update(path.name.encode() + b"\0" + judged_source(path.read_text()) + b"\0")
    return digest.hexdigest()[:16]


# What a module says rather than judges: the text fields of a diagnosis's declaration
# (graders.diagnoses: its name, words, hints), a claim's words (graders.claims) and a check's
# sentence's text (graders.sentences), rendered when a grade is read; and docstrings. Comments
# are not in the syntax tree at all.
WORD_FIELDS = frozenset(
    {"name", "words", "said_in", "by_exercise", "hint", "where", "what", "fix", "lesson"}
)
WORD_CALLS = frozenset({"Declared", "Hint", "Claim", "Sentence"})


# Cached by the module's text: each exercise's version reads the same judging modules, and a
# process loads every exercise (twice at a server's start: its threads ask at once).
@functools.cache
def judged_source(source: str) -> bytes:
    """A module's syntax tree without its words (`WORD_FIELDS` of `WORD_CALLS`, a Claim's
    words, docstrings): what of it can change a stored grade."""
    tree = parse_module(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Expr(ast.Constant(""))
        if isinstance(node, ast.Call):
            called = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if called not in WORD_CALLS:
                continue
            for keyword in node.keywords:
                if keyword.arg in WORD_FIELDS:
                    keyword.value = ast.Constant("")
            if called in ("Claim", "Sentence") and len(node.args) > 1:
                # Claim(key, words, holds); Sentence(key, text): the text's fields are judged
                # where the sentence is said (the values it is given), not in its words.
                node.args[1] = ast.Constant("")
    return ast.dump(tree).encode()


def configuration_problem(exercise: Exercise) -> str | None:
    """What in the exercise the grader cannot judge (a kind it does not know, a check its kind
    does not make), said as the field and what to do; None when all is known."""
    # Imported here: the kinds' modules import this one (for CaseSpec and Exercise).
    from graders.kinds import KINDS

    kind = KINDS.get(exercise.kind)
    if kind is None:
        return f"kind: {exercise.kind!r} is no kind: use one of {', '.join(sorted(KINDS))}"
    unknown = sorted(set(exercise.checks) - set(kind.judge.checks))
    if unknown:
        return (
            f"checks: {', '.join(map(repr, unknown))} is no check of kind {exercise.kind!r}: "
            f"use one of {', '.join(sorted(kind.judge.checks))}"
        )
    for case in exercise.cases:
        unread = sorted(case.model_fields_set & KIND_SETTINGS - kind.case_settings)
        if unread:
            reads = ", ".join(sorted(kind.case_settings)) or "none of them"
            return (
                f"cases ({case.id}): {', '.join(map(repr, unread))}: kind {kind.name!r} does "
                f"not read it, so it would change nothing: remove it (of the settings only "
                f"some kinds read, {kind.name!r} reads {reads})"
            )
    return None


def _read() -> tuple[dict[str, Exercise], dict[str, str]]:
    """The exercise folders that load, by id in the unit's order, and those refused, with why."""
    loaded: dict[str, tuple[Exercise, str]] = {}
    refused: dict[str, str] = {}
    for toml in sorted(EXERCISES_DIR.glob("*/exercise.toml")):
        try:
            exercise = load_exercise(toml.parent)
            if exercise.id in loaded:
                raise ExerciseRefused(
                    f"{toml}: id: {exercise.id!r} is taken by the folder "
                    f"{loaded[exercise.id][1]!r}: give it another"
                )
        except ExerciseRefused as exc:
            refused[toml.parent.name] = str(exc)
            log.error("exercise folder %s refused: %s", toml.parent.name, exc)
            continue
        loaded[exercise.id] = (exercise, toml.parent.name)
    in_order = sorted((exercise for exercise, _ in loaded.values()), key=lambda e: e.position)
    return {exercise.id: exercise for exercise in in_order}, refused


_proving = threading.Lock()


@functools.cache
def _loaded() -> tuple[dict[str, Exercise], dict[str, str]]:
    """The exercises served, by id, and the folders refused, with why. Read once per process:
    a folder changed, added or removed is seen at the next restart. A folder that loads is
    served only once proven sound by check-exercises' own proof (graders.proving), which is
    kept per version, so that a restart does not prove it again."""
    # Imported here: the proof grades, and grading reads this module.
    from graders.proving import proven_problems

    with _proving:  # threads that ask at once: the later ones read the proofs the first kept
        loaded, refused = _read()
        refused = dict(refused)
        served: dict[str, Exercise] = {}
        for exercise in loaded.values():
            try:
                problems = proven_problems(exercise)
            except Exception as exc:  # an exercise the grader cannot even prove: not served
                log.exception("the proof of exercise %s stopped", exercise.id)
                said = " ".join(str(exc).split())  # one line, as every reason
                problems = [f"{exercise.id}: the proof stopped: {type(exc).__name__}: {said}"]
            if problems:
                folder = Path(exercise.folder).name
                refused[folder] = (
                    f"{exercise.folder}: not served, unsound ({len(problems)} problem(s): "
                    f"loopgrade check-exercises says them all): {problems[0]}"
                )
                log.error("exercise folder %s refused: %s", folder, refused[folder])
                continue
            served[exercise.id] = exercise
        log.info(
            "%d exercises served from %s, %d folders refused; a changed folder is read at the "
            "next restart of each server and worker",
            len(served),
            EXERCISES_DIR,
            len(refused),
        )
        return served, refused


def _all_exercises() -> dict[str, Exercise]:
    return _loaded()[0]


def loaded_exercises() -> tuple[list[Exercise], dict[str, str]]:
    """The folders that load, proven or not, in the unit's order, and those that do not (folder
    -> why): for check-exercises, which proves them itself, and the scaffold."""
    loaded, refused = _read()
    return list(loaded.values()), dict(refused)


def refused_exercises() -> dict[str, str]:
    """The exercise folders that were not loaded: folder name -> the one-line reason."""
    return dict(_loaded()[1])


def list_exercises() -> list[Exercise]:
    """Every exercise, in the unit's order."""
    return list(_all_exercises().values())


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id; raises UnknownExercise."""
    try:
        return _all_exercises()[exercise_id]
    except KeyError:
        raise UnknownExercise(exercise_id) from None


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
