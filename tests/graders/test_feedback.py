"""Every diagnosis, said on every exercise, is true of that exercise: checked against the
exercise's own words (its signature, checks, reference and declared bugs)."""

from __future__ import annotations

import re

import pytest

from graders.diagnoses import codes
from graders.exercises import Exercise, list_exercises
from graders.feedback import explanation
from graders.report import Diagnosis, diagnosis_name

CODES: tuple[Diagnosis, ...] = codes()
RENDERED = [(e, code) for e in list_exercises() for code in CODES]


def calls_in(source: str) -> set[str]:
    return set(re.findall(r"(\w+)\(", source))


@pytest.mark.parametrize(
    ("exercise", "code"), RENDERED, ids=lambda v: v.id if isinstance(v, Exercise) else v
)
def test_every_diagnosis_is_true_of_every_exercise(exercise: Exercise, code: Diagnosis) -> None:
    text = explanation(code, exercise)
    assert text
    parameters = exercise.signature.split("(", 1)[1].split(")", 1)[0]
    # prove-accumulation forbids a step; grad-magnitude reads; a function given `lr` is a step
    if "optimizer" not in parameters and "lr" not in parameters.split(", "):
        assert not re.search(r"\bstep|optimizer|training loop|\bepoch", text, re.I), text
    if not any(check.endswith("weights-match") for check in exercise.checks):
        assert not re.search(r"weights? (differ|match)|every update", text, re.I), text
    if "micro_batches" not in parameters:
        assert "micro-batch" not in text, text
    # What the text tells the learner to call is never what only a declared bug calls.
    bugs = set().union(*(calls_in(v.source) for v in exercise.variants))
    only_in_bugs = bugs - calls_in(exercise.solution_code)
    suggested = set().union(*(calls_in(span) for span in re.findall(r"`([^`]+)`", text)))
    assert not suggested & only_in_bugs, (suggested & only_in_bugs, text)


def test_a_suggested_order_is_the_whole_order() -> None:
    """Backward then step, without clearing, is a known bug of fix-the-loop: the fix for a step
    taken before backward says all three."""
    fix_the_loop = next(e for e in list_exercises() if e.id == "fix-the-loop")
    text = explanation("step-before-backward", fix_the_loop)
    assert "Clear the gradients, call `loss.backward()`, and only then `optimizer.step()`" in text


def test_the_name_of_a_late_clear_is_true_when_zero_grad_runs_after_the_step() -> None:
    """train-step's zero-after-step clears after the step: never cleared would be false."""
    assert diagnosis_name("missing-zero-grad") == "Gradients not cleared before backward"


@pytest.mark.parametrize("exercise", list_exercises(), ids=lambda e: e.id)
def test_a_wrong_return_type_is_told_with_the_exercises_own_signature(exercise: Exercise) -> None:
    assert exercise.signature in explanation("wrong-return-type", exercise)
