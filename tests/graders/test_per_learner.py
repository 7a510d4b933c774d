"""Per-learner cases (`case_seeds = "per-learner"`) and the words said of a correct submission.

A per-learner exercise draws each learner's visible seeds from (exercise, learner, case): two
learners see different numbers, one learner the same ones every time (so a regrade too), and
the hidden cases stay as declared. `check-exercises` proves such an exercise on several
learners' seeds. The repository's exercises keep fixed seeds (the corpus is graded on them):
these tests turn it on in a copy of train-step.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox
from graders import exercises, grade
from graders.exercise import Exercise, for_learner, variant_seed
from graders.exercises import get_exercise, list_exercises
from graders.proving import judge_source, prove, wording_problems
from graders.report import GradeReport

REPO_EXERCISES = Path(__file__).resolve().parents[2] / "exercises"


@pytest.fixture
def per_learner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the exercises in which train-step's visible cases are per learner."""
    copy = tmp_path / "exercises"
    shutil.copytree(REPO_EXERCISES, copy)
    toml = copy / "train-step" / "exercise.toml"
    toml.write_text(
        toml.read_text().replace("\n[checks]", '\ncase_seeds = "per-learner"\n\n[checks]', 1)
    )
    monkeypatch.setattr(exercises, "EXERCISES_DIR", copy)
    exercises._loaded.cache_clear()
    yield copy
    exercises._loaded.cache_clear()


def visible_numbers(report: GradeReport) -> list[list[float | None]]:
    return [plot.learner for plot in report.plots]


def hidden_checks(report: GradeReport) -> list[tuple[str, bool, float, str]]:
    return [(c.id, c.passed, c.points, c.message) for c in report.checks if c.hidden]


def test_a_learners_cases_are_their_own_and_the_hidden_ones_everyones(per_learner: Path) -> None:
    exercise = get_exercise("train-step")
    assert exercise.case_seeds == "per-learner"
    ada, bob = for_learner(exercise, "user:ada"), for_learner(exercise, "user:bob")
    for declared, a, b in zip(exercise.cases, ada.cases, bob.cases, strict=True):
        if declared.hidden:
            assert declared == a == b
        else:
            assert len({declared.seed, a.seed, b.seed}) == 3
            assert a.seed == variant_seed("train-step", "user:ada", declared.id)
            assert 0 <= a.seed < 2**32
    assert for_learner(exercise, "user:ada") == ada
    # Anonymous practice, and an exercise with fixed seeds, get the declared cases.
    assert for_learner(exercise, None) == exercise
    fixed = get_exercise("fix-the-loop")
    assert for_learner(fixed, "user:ada") == fixed


def test_two_learners_see_different_numbers_and_a_regrade_the_same(
    per_learner: Path, grading_runner: sandbox.Runner
) -> None:
    exercise = get_exercise("train-step")
    bug = next(v for v in exercise.variants if v.id == "no-zero-grad").source
    ada = grade("train-step", bug, runner=grading_runner, learner_key="user:ada")
    bob = grade("train-step", bug, runner=grading_runner, learner_key="user:bob")
    again = grade("train-step", bug, runner=grading_runner, learner_key="user:ada")
    assert ada.diagnosis == bob.diagnosis == "missing-zero-grad"
    assert visible_numbers(ada) and visible_numbers(ada) != visible_numbers(bob)
    assert again == ada
    assert hidden_checks(ada) == hidden_checks(bob)
    assert ada.exercise_version == bob.exercise_version == exercise.version
    solution = grade(
        "train-step", exercise.solution_code, runner=grading_runner, learner_key="user:bob"
    )
    assert (solution.score, solution.diagnosis) == (exercise.max_score, "correct")


def test_check_exercises_proves_a_per_learner_exercise_on_several_learners(
    per_learner: Path,
) -> None:
    exercise = get_exercise("train-step")
    assert prove(exercise) == []
    # A bug that only a declared seed's numbers could tell apart would be named, with the seeds.
    unsound = exercise.model_copy(update={"solution_code": exercise.variants[0].source})
    problems = prove(unsound)
    assert any("(per-learner cases: basic seed " in p for p in problems), problems


@pytest.mark.parametrize("exercise", list_exercises(), ids=lambda e: e.id)
def test_a_correct_submission_is_told_what_this_exercise_asked(
    exercise: Exercise,
) -> None:
    report = judge_source(exercise, exercise.solution_code)
    assert report.diagnosis == "correct"
    assert report.feedback.startswith(exercise.correct), report.feedback
    assert wording_problems(exercise) == []


def test_the_gradient_exercises_are_not_praised_for_a_loop() -> None:
    for exercise_id in ("grad-magnitude", "prove-accumulation"):
        feedback = judge_source(get_exercise(exercise_id), get_exercise(exercise_id).solution_code)
        assert "loop" not in feedback.feedback and "step" not in feedback.feedback.lower()


def test_check_exercises_requires_the_correct_words() -> None:
    exercise = get_exercise("train-step").model_copy(update={"correct": ""})
    (problem,) = wording_problems(exercise)
    assert problem.startswith(f"{exercise.folder}/exercise.toml: correct: missing")
