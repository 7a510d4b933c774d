"""The train-step grader, end to end through the real sandbox.

Every known mistake must get its own diagnosis, every correct style full marks, and nothing a
submission does inside the sandbox may raise its score.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import sandbox
from graders import grade
from graders.exercises import get_exercise
from graders.grading import HIDDEN_FAILURES
from graders.proving import judge_source

EXERCISE = get_exercise("train-step")
FULL = EXERCISE.max_score
BUGS = Path(__file__).resolve().parents[2] / "exercises" / "train-step" / "bugs"


def code(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


def test_the_reference_scores_full_through_the_sandbox(grading_runner: sandbox.Runner) -> None:
    report = grade("train-step", EXERCISE.solution_code, runner=grading_runner)
    assert report.diagnosis == "correct", report.feedback
    assert report.score == FULL
    assert all(check.passed for check in report.checks)


@pytest.mark.parametrize(
    ("bug", "diagnosis"),
    [
        ("no_zero_grad.py", "missing-zero-grad"),
        ("step_then_backward.py", "step-before-backward"),
        ("grad_zero_in_place.py", "grad-none-error"),
    ],
)
def test_bugs_get_their_diagnosis_through_the_sandbox(
    bug: str, diagnosis: str, grading_runner: sandbox.Runner
) -> None:
    report = grade("train-step", (BUGS / bug).read_text(), runner=grading_runner)
    assert report.diagnosis == diagnosis, report.feedback
    assert report.score < FULL


def test_step_before_backward_feedback_speaks_the_lesson(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step", (BUGS / "step_then_backward.py").read_text(), runner=grading_runner
    )
    assert "stepped before `backward()`" in report.feedback
    assert "previous batch's" in report.feedback


def test_look_alikes_are_separated_by_call_order(grading_runner: sandbox.Runner) -> None:
    """Both leave the weights unchanged; only the order of calls tells them apart."""
    no_backward = grade("train-step", (BUGS / "no_backward.py").read_text(), runner=grading_runner)
    zero_between = grade(
        "train-step", (BUGS / "zero_between.py").read_text(), runner=grading_runner
    )
    assert no_backward.score == zero_between.score
    assert no_backward.diagnosis == "missing-backward"
    assert zero_between.diagnosis == "zero-grad-before-step"


def test_a_bug_written_differently_is_still_recognised(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        code("""
            def train_step(model, optimizer, loss_fn, x, y):
                prediction = model(x)
                error = loss_fn(prediction, y)
                error.backward()          # never cleared: gradients pile up
                optimizer.step()
                return error.detach().item()
        """),
        runner=grading_runner,
    )
    assert report.diagnosis == "missing-zero-grad"
    failed = {c.id for c in report.checks if not c.passed}
    assert {"weights-match", "fresh-gradients"} <= failed


def test_a_visible_failure_says_where_and_by_how_much(grading_runner: sandbox.Runner) -> None:
    report = grade("train-step", (BUGS / "no_zero_grad.py").read_text(), runner=grading_runner)
    weights = next(c for c in report.checks if c.id == "weights-match")
    assert not weights.passed and not weights.hidden
    assert "case `basic`, call 2" in weights.message
    assert "`weight[0][2]` is" in weights.message and "was expected" in weights.message


def test_a_hidden_only_failure_shows_no_numbers(grading_runner: sandbox.Runner) -> None:
    """A hand-written SGD update is right for plain SGD, wrong with momentum (hidden)."""
    report = grade(
        "train-step",
        code("""
            import torch

            def train_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                lr = optimizer.param_groups[0]["lr"]
                with torch.no_grad():
                    for p in model.parameters():
                        p -= lr * p.grad
                return loss.item()
        """),
        runner=grading_runner,
    )
    weights = next(c for c in report.checks if c.id == "weights-match")
    assert not weights.passed
    assert weights.hidden
    assert "hidden case" in weights.message
    assert not re.search(r"\d\.\d", weights.message)
    assert "was expected" not in weights.message
    assert report.score < FULL


def test_syntax_error_names_the_line(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        "def train_step(model, optimizer, loss_fn, x, y)\n    pass\n",
        runner=grading_runner,
    )
    assert report.diagnosis == "syntax-error"
    assert report.score == 0
    assert "Line 1" in report.feedback


def test_missing_function(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        "def step(model, optimizer, loss_fn, x, y):\n    return 0.0\n",
        runner=grading_runner,
    )
    assert report.diagnosis == "missing-function"
    assert report.score == 0
    assert "train_step" in report.feedback


def test_runtime_error_gives_type_and_message(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        code("""
            def train_step(model, optimizer, loss_fn, x, y):
                raise ValueError("bad shapes here")
        """),
        runner=grading_runner,
    )
    assert report.diagnosis == "runtime-error"
    assert report.score == 0
    assert "ValueError" in report.feedback and "bad shapes here" in report.feedback
    assert "line 2" in report.feedback


def test_the_traceback_shown_starts_in_the_learners_code(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        code("""
            def forward(model, x):
                return model(x.t())

            def train_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad()
                loss = loss_fn(forward(model, x), y)
                loss.backward()
                optimizer.step()
                return loss.item()
        """),
        runner=grading_runner,
    )
    assert report.diagnosis == "runtime-error"
    (block,) = re.findall(r"```text\n(Traceback.*?)```", report.feedback, re.DOTALL)
    files = re.findall(r'File "([^"]+)", line (\d+), in (\w+)', block)
    # Their two frames first, in call order, then torch's; nothing of the harness (main.py).
    assert [(name, int(line), where) for name, line, where in files[:2]] == [
        ("submission.py", 6, "train_step"),
        ("submission.py", 2, "forward"),
    ]
    # torch's frames are named from the package on: the server's install path is not shown.
    assert all(name == "submission.py" or name.startswith("torch/") for name, _, _ in files)
    assert "site-packages" not in block and "/lib/python3" not in block
    assert "main.py" not in report.feedback
    # Their lines are quoted under their frames, as for a file on disk.
    assert "    loss = loss_fn(forward(model, x), y)\n" in block
    assert "    return model(x.t())\n" in block
    assert block.rstrip().splitlines()[-1].startswith("RuntimeError: mat1 and mat2 shapes")


def test_grad_none_error_offers_both_fixes(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        code("""
            def train_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad()
                print(model.weight.grad.abs().sum())
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.item()
        """),
        runner=grading_runner,
    )
    assert report.diagnosis == "grad-none-error"
    assert report.score == 0
    assert "is not None" in report.feedback
    assert "set_to_none=False" in report.feedback


def test_an_error_in_a_hidden_case_shows_no_traceback_or_message(
    grading_runner: sandbox.Runner,
) -> None:
    report = grade(
        "train-step",
        code("""
            def train_step(model, optimizer, loss_fn, x, y):
                if x.shape[1] == 6:
                    raise RuntimeError("secret-input " + str(x.tolist()))
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.item()
        """),
        runner=grading_runner,
    )
    assert report.diagnosis == "runtime-error"
    assert report.facts == HIDDEN_FAILURES["runtime-error"]
    text = report.model_dump_json()
    # Not even the exception's type: a class name is the learner's to choose.
    for chosen in ("secret-input", "Traceback", "RuntimeError"):
        assert chosen not in text


def test_printed_output_of_hidden_cases_is_never_shown(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        code("""
            def train_step(model, optimizer, loss_fn, x, y):
                print("shape", list(x.shape))
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.item()
        """),
        runner=grading_runner,
    )
    assert report.score == FULL
    visible = {(c.batch_size, c.in_features) for c in EXERCISE.cases if not c.hidden}
    hidden = {(c.batch_size, c.in_features) for c in EXERCISE.cases if c.hidden}
    for batch, features in visible:
        assert f"shape [{batch}, {features}]" in report.output
    for batch, features in hidden:
        assert f"shape [{batch}, {features}]" not in report.output


def test_plots_cover_visible_cases_only(grading_runner: sandbox.Runner) -> None:
    report = grade("train-step", (BUGS / "no_zero_grad.py").read_text(), runner=grading_runner)
    cases = {p.case for p in report.plots}
    assert cases == {c.id for c in EXERCISE.cases if not c.hidden}
    loss = next(p for p in report.plots if p.label == "loss")
    assert len(loss.learner) == len(loss.reference) >= 3


def test_a_mean_loss_divided_by_the_batch_size_again_is_named_for_it() -> None:
    """A scale of 1/B is another constant in each case (batches of 8 and 5 visible, 16 and 4
    hidden): fitted as a function of the case, not as one number, and told as that."""
    report = judge_source(
        EXERCISE,
        code("""
            def train_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad()
                loss = loss_fn(model(x), y) / len(x)
                loss.backward()
                optimizer.step()
                return loss.item() * len(x)
        """),
    )
    assert report.diagnosis == "loss-divided-by-batch", report.feedback
    assert report.score < FULL
    assert "divided by the batch's size, in every case" in report.feedback
