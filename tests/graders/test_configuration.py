"""The trust boundary at the exercise's configuration: a folder the grader cannot judge is
refused when exercises load (one line: file, field, what to do) while the others load, and a
fault of the exercise or the grader is `GraderFault`, never the learner's score."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox
from graders import exercises, grade, grading
from graders.exercises import get_exercise, list_exercises, refused_exercises
from graders.grading import GraderFault
from graders.kinds import KINDS
from tests.app.conftest import CORRECT_CODE
from tests.graders.conftest import SHARED_LIMITS

REPO_EXERCISES = Path(__file__).resolve().parents[2] / "exercises"


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the exercises, loaded instead of the repository's."""
    copy = tmp_path / "exercises"
    shutil.copytree(REPO_EXERCISES, copy)
    monkeypatch.setattr(exercises, "EXERCISES_DIR", copy)
    exercises._loaded.cache_clear()
    yield copy
    exercises._loaded.cache_clear()


def edit(folder: Path, old: str, new: str) -> None:
    toml = folder / "exercise.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new, 1))


def test_an_unknown_check_refuses_its_folder_only(folders: Path) -> None:
    edit(folders / "train-step", "weights-match = 3", "weights-matches = 3")
    (reason,) = refused_exercises().values()
    assert list(refused_exercises()) == ["train-step"]
    assert "\n" not in reason
    assert str(folders / "train-step" / "exercise.toml") in reason
    assert "checks: 'weights-matches' is no check of kind 'step-function'" in reason
    assert "use one of" in reason and "weights-match" in reason
    assert [e.id for e in list_exercises()] == [
        "prove-accumulation",
        "grad-magnitude",
        "accumulate-microbatches",
        "fix-the-loop",
    ]


def test_an_unknown_diagnosis_code_refuses_its_folder(folders: Path) -> None:
    edit(folders / "train-step", 'diagnosis = "missing-zero-grad"', 'diagnosis = "no-zero-grad"')
    (reason,) = refused_exercises().values()
    assert "\n" not in reason and "variants.0.diagnosis" in reason, reason
    assert len(list_exercises()) == 4


def test_a_kind_not_registered_refuses_its_folders(
    folders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(KINDS, "gradient-reading")
    assert list(refused_exercises()) == ["grad-magnitude"]
    reason = refused_exercises()["grad-magnitude"]
    assert "kind: 'gradient-reading' is no kind: use one of" in reason, reason
    assert "step-function" in reason
    assert "grad-magnitude" not in [e.id for e in list_exercises()]


def test_a_fault_of_the_exercise_is_the_grader_s_not_the_learner_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A check its kind does not make, as a folder changed after it was loaded would have.
    exercise = get_exercise("train-step")
    broken = exercise.model_copy(update={"checks": {**exercise.checks, "no-such-check": 1.0}})
    monkeypatch.setattr(grading, "get_exercise", lambda _id: broken)
    runner = sandbox.open_runner("bwrap")
    try:
        with pytest.raises(GraderFault, match="cannot judge its own reference: KeyError"):
            grade("train-step", CORRECT_CODE, SHARED_LIMITS, runner)
    finally:
        runner.close()
