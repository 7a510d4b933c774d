"""Diagnosis by model: a name only when a model explains the numbers and the calls agree.

Judged in this process (`judge_source`: the harness, parsing and judging of grade(), without the
sandbox); the corpus (test_corpus.py) does the same through the real sandbox.
"""

from __future__ import annotations

import runpy
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from graders import grading
from graders.diagnoses import declared, registry
from graders.exercises import get_exercise, load_exercise
from graders.explanation import agrees
from graders.proving import judge_source
from graders.report import GradeReport, diagnosis_name
from sandbox import Limits
from tests.graders.sandbox_results import groups, harness_result

EXERCISES_DIR = Path(__file__).resolve().parents[2] / "exercises"


def judged(exercise_id: str, body: str) -> GradeReport:
    return judge_source(get_exercise(exercise_id), textwrap.dedent(body).strip() + "\n")


@pytest.mark.parametrize(
    ("recorded", "model", "agree"),
    [
        (["zero_grad", "backward", "step"], ["zero_grad", "backward", "step"], True),
        # A model may clear where nothing was recorded: `p.grad = None` by hand.
        (["backward", "step"], ["zero_grad", "backward", "step"], True),
        # A recorded zero_grad where the model never clears contradicts it.
        (["zero_grad", "backward", "step"], ["backward", "step"], False),
        (["backward", "zero_grad", "step"], ["zero_grad", "backward", "step"], False),
        (["zero_grad", "step", "backward"], ["zero_grad", "backward", "step"], False),
    ],
)
def test_a_call_order_agrees_only_where_it_does_not_contradict(
    recorded: list[str], model: list[str], agree: bool
) -> None:
    assert agrees(recorded, model) is agree


def test_a_loop_that_clears_every_call_is_not_told_it_never_clears() -> None:
    """It steps twice: the order alone used to read an empty step as 'never clears'."""
    report = judged(
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.step()
            return loss.item()
        """,
    )
    assert report.diagnosis == "step-twice", report.feedback
    assert "missing-zero-grad" not in report.other_diagnoses


def test_backward_twice_is_said_in_the_lesson_s_words() -> None:
    report = judged(
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward(retain_graph=True)
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
    )
    assert report.diagnosis == "backward-twice"
    assert (
        "Your gradients are exactly twice the correct ones: `backward()` ran twice before "
        "the step." in report.feedback
    )


def test_two_explanations_that_fit_equally_are_both_said(tmp_path: Path) -> None:
    """With no momentum case (no buffer recorded) and `.grad` cleared after the step, twice the
    gradient and twice the learning rate make the same trajectory: the grader says both."""
    folder = tmp_path / "train-step"
    shutil.copytree(EXERCISES_DIR / "train-step", folder)
    toml = folder / "exercise.toml"
    toml.write_text(toml.read_text().replace("momentum = 0.9", "momentum = 0.0"))
    source = """
        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            (2 * loss).backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss.item()
    """
    report = judge_source(load_exercise(folder), textwrap.dedent(source).strip() + "\n")
    assert report.diagnosis == "gradients-scaled"
    assert report.other_diagnoses == ["wrong-learning-rate"]
    assert "Another explanation fits your numbers and your calls just as well" in report.feedback
    # With the momentum case, the recorded momentum buffer tells them apart.
    assert judged("train-step", source).other_diagnoses == []


def test_what_no_model_explains_is_incorrect_and_says_what_first_went_wrong() -> None:
    report = judged(
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y) + 0.01 * model.weight.pow(2).sum()
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
    )
    assert report.diagnosis == "incorrect"
    assert report.other_diagnoses == []
    # What differs is said once, by the check; the feedback points at it.
    first = report.checks[[c.passed for c in report.checks].index(False)]
    assert first.id == "weights-match"
    assert "In case `basic`, call 1: your weights differ from the reference loop's" in (
        first.message
    )
    assert first.message not in report.feedback
    assert "The first check that fails is `weights-match`." in report.feedback


def test_two_mistakes_in_one_loop_are_both_named() -> None:
    """Steps first and never clears. (fix-the-loop's loop as given is its starter: not-started.)"""
    report = judged(
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            loss = loss_fn(model(x), y)
            optimizer.step()
            loss.backward()
            return loss.item()
        """,
    )
    assert report.diagnosis == "step-before-backward"
    assert "second mistake as well (`missing-zero-grad`)" in report.feedback


def test_a_mistake_only_hidden_cases_show_is_named_without_their_numbers() -> None:
    """A hand-written SGD update is right for plain SGD, wrong with momentum (hidden)."""
    report = judged(
        "train-step",
        """
        import torch

        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= optimizer.param_groups[0]["lr"] * p.grad
            return loss.item()
        """,
    )
    assert report.diagnosis == "wrong-momentum"
    assert "0.9" not in report.feedback and "0.03" not in report.feedback


@pytest.mark.parametrize(
    ("passes", "diagnosis", "says"),
    [(3, "backward-twice", "exactly three times the correct ones"), (30, "incorrect", "")],
)
def test_a_loop_with_far_more_calls_than_a_right_one_is_not_replayed(
    passes: int, diagnosis: str, says: str
) -> None:
    """Replays run in the grader's process: three backward passes a call are modelled, thirty
    are not."""
    report = judged(
        "train-step",
        f"""
        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            for _ in range({passes}):
                loss.backward(retain_graph=True)
            optimizer.step()
            return loss.item()
        """,
    )
    assert report.diagnosis == diagnosis
    assert says in report.feedback


def test_copies_taken_after_the_wrong_passes_are_named() -> None:
    """The first copy taken after both passes: it holds two passes' gradients, not one."""
    report = judged(
        "prove-accumulation",
        """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            loss_fn(model(x), y).backward()
            first = model.weight.grad.clone()
            second = model.weight.grad.clone()
            return first, second
        """,
    )
    assert report.diagnosis == "wrong-number-of-passes"
    assert "Your first tensor holds two passes' gradients and your second two passes'." in (
        report.feedback
    )


def test_every_diagnosis_code_has_words_and_a_line_in_the_docs() -> None:
    docs = (EXERCISES_DIR.parent / "docs" / "exercises.md").read_text()
    made = runpy.run_path(str(EXERCISES_DIR.parent / "scripts" / "diagnosis_codes.py"))
    # The committed table is the one made from the declarations: run the script after a change.
    assert made["with_table"](docs) == docs
    for code in registry():
        name = declared(code).name
        assert name[:1].isupper() and name != code, code
        assert f"| `{code}` | {name} |" in docs, f"docs/exercises.md does not list {code}"
    assert diagnosis_name("step-before-backward") == "Step before backward"
    # A code from a newer version (a stored row, say) is shown as it is, not dropped.
    assert diagnosis_name("some-new-code") == "some-new-code"


def test_a_judgment_is_made_once_for_the_same_recorded_values_and_handed_out_as_a_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exercise = get_exercise("train-step")
    bug = (EXERCISES_DIR / "train-step" / "bugs" / "no_zero_grad.py").read_text()
    judged: list[str] = []
    real_judge = grading.judge

    def counting_judge(*args: Any, **kwargs: Any) -> GradeReport:
        judged.append(args[0].id)
        return real_judge(*args, **kwargs)

    monkeypatch.setattr(grading, "judge", counting_judge)

    def graded(source: str, printed: bytes) -> GradeReport:
        runs = [
            (cases, harness_result(exercise, source, cases, stdout=printed))
            for cases in groups(exercise)
        ]
        return grading.grade_runs(exercise, runs, Limits())

    first = graded(bug, b"first learner\n")
    assert first.diagnosis == "missing-zero-grad" and first.output == "first learner\n"
    expected = first.model_copy(deep=True)
    first.checks[0].message = "changed by a caller"
    first.feedback = "changed by a caller"
    judged.clear()
    second = graded(bug, b"second learner\n")
    assert judged == []  # the same numbers: judged once
    assert second.output == "second learner\n"
    assert second.model_copy(update={"output": expected.output}) == expected
    # Other numbers are judged afresh.
    solution = (EXERCISES_DIR / "train-step" / "solution.py").read_text()
    assert graded(solution, b"").diagnosis == "correct"
    assert judged == ["train-step"]
