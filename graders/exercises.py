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

EXERCISES_DIR = Path(
    os.environ.get("LOOPGRADE_EXERCISES_DIR", Path(__file__).resolve().parent.parent / "exercises")
)


class UnknownExercise(KeyError):
    """No exercise has this id."""


class CaseSpec(BaseModel):
    """One fixed-seed problem; `hidden` cases show the learner only the check and its message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    seed: int
    in_features: int = Field(ge=1, le=64)
    out_features: int = Field(ge=1, le=64)
    batch_size: int = Field(ge=1, le=256)
    steps: int = Field(ge=3, le=50)
    lr: float = Field(gt=0)
    optimizer: Literal["sgd"] = "sgd"
    momentum: float = Field(default=0.0, ge=0, lt=1)
    stale_grads: bool = False
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
    calls: list[str]
    source: str


class Exercise(BaseModel):
    """Everything about one exercise: what the learner sees and what the grader checks."""

    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    kind: Literal["train-step"]
    entry_point: str
    signature: str
    prompt_markdown: str
    starter_code: str
    solution_code: str
    checks: dict[str, float]
    cases: list[CaseSpec]
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
    exercises = {}
    for toml_path in sorted(EXERCISES_DIR.glob("*/exercise.toml")):
        exercise = load_exercise(toml_path.parent)
        exercises[exercise.id] = exercise
    return exercises


def list_exercises() -> list[Exercise]:
    """Every exercise, in folder order."""
    return list(_all_exercises().values())


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id; raises UnknownExercise."""
    try:
        return _all_exercises()[exercise_id]
    except KeyError:
        raise UnknownExercise(exercise_id) from None
