"""Exercises as data: one folder each under `exercises/`, read from `exercise.toml`."""

from __future__ import annotations

import functools
import hashlib
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from graders.report import Diagnosis

Kind = Literal[
    "train-step", "accumulate-microbatches", "accumulation-demo", "grad-magnitude", "whole-loop"
]

EXERCISES_DIR = Path(
    os.environ.get("LOOPGRADE_EXERCISES_DIR", Path(__file__).resolve().parent.parent / "exercises")
)


# Bounds on an exercise's cases. The hidden ones reach the harness as one later input, which a
# pipe holds whole (sandbox.supervise.LATER_INPUT_MAX_BYTES): so many cases at their largest
# fit in it with room to spare (tests/graders/test_unit.py), and an exercise cannot be loaded
# that would fail every grading.
MAX_CASES = 64
MAX_CASE_ID_CHARS = 48


class UnknownExercise(KeyError):
    """No exercise has this id."""


class CaseSpec(BaseModel):
    """One fixed-seed problem; `hidden` cases show the learner only the check and its message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=MAX_CASE_ID_CHARS)
    seed: int = Field(ge=0, lt=2**32)
    in_features: int = Field(ge=1, le=64)
    out_features: int = Field(ge=1, le=64)
    batch_size: int = Field(ge=1, le=256)
    steps: int = Field(ge=1, le=50, description="Calls of the function, or batches per epoch.")
    lr: float = Field(default=0.1, gt=0)
    optimizer: Literal["sgd"] = "sgd"
    momentum: float = Field(default=0.0, ge=0, lt=1)
    stale_grads: bool = False
    micro_batches: int = Field(default=0, ge=0, le=16, description="Micro-batches per call.")
    epochs: int = Field(default=0, ge=0, le=20, description="Epochs, for whole-loop cases.")
    grad_state: Literal["present", "none", "zeros", "mixed"] = "present"
    hidden: bool = False

    def harness_spec(self) -> dict[str, Any]:
        """What the harness needs to build the case; whether it is hidden is not its business."""
        return self.model_dump(exclude={"hidden"})


class Variant(BaseModel):
    """A known buggy loop, the diagnosis it must get, and the call order one step of it makes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    file: str
    diagnosis: Diagnosis
    calls: list[str] = Field(default_factory=list)
    note: str = Field(default="", description="Said to a learner whose code behaves like this.")
    source: str


class Exercise(BaseModel):
    """Everything about one exercise: what the learner sees and what the grader checks."""

    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    position: int = Field(description="Place in the unit, from 1.")
    kind: Kind
    entry_point: str
    signature: str
    prompt_markdown: str
    starter_code: str
    solution_code: str
    checks: dict[str, float]
    cases: list[CaseSpec] = Field(min_length=1, max_length=MAX_CASES)
    variants: list[Variant]
    version: str = Field(description="Content hash of the exercise folder.")

    @property
    def max_score(self) -> float:
        return sum(self.checks.values())


def _content_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def load_exercise(folder: Path) -> Exercise:
    """Read one exercise folder; raises ValueError naming the file and field that is wrong."""
    config = tomllib.loads((folder / "exercise.toml").read_text())
    try:
        return Exercise.model_validate(
            {
                "id": config["id"],
                "title": config["title"],
                "position": config["position"],
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
            }
        )
    except (KeyError, OSError, ValueError) as exc:
        raise ValueError(f"{folder / 'exercise.toml'}: {exc}") from exc


@functools.cache
def _all_exercises() -> dict[str, Exercise]:
    loaded = [load_exercise(path.parent) for path in EXERCISES_DIR.glob("*/exercise.toml")]
    return {exercise.id: exercise for exercise in sorted(loaded, key=lambda e: e.position)}


def list_exercises() -> list[Exercise]:
    """Every exercise, in the unit's order."""
    return list(_all_exercises().values())


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id; raises UnknownExercise."""
    try:
        return _all_exercises()[exercise_id]
    except KeyError:
        raise UnknownExercise(exercise_id) from None
