"""The fix, replayed: the learner's loop with only its named mistake fixed, on their charts.

The known bugs are graded through the warm pool (`grading_runner`); the rest is judged in this
process (`judge_source`). A single-mistake loop with its mistake fixed is the reference loop,
so its replayed line must be the reference's, number for number, and differ from the learner's.
"""

from __future__ import annotations

import textwrap

import pytest

import sandbox
from graders import grade
from graders.exercises import get_exercise
from graders.fix_replay import fix_label, fixed_calls
from graders.judging import within_tolerance
from graders.kinds import kind_of
from graders.proving import judge_source
from graders.report import GradeReport, PlotSeries
from tests.graders.conftest import SHARED_LIMITS
from tests.graders.test_hidden import assert_conceals, betrayed, secrets

# Every known bug of the exercises that step whose loop makes exactly one mistake.
SINGLE_MISTAKES = [
    ("train-step", "no-zero-grad"),
    ("train-step", "zero-after-step"),
    ("train-step", "step-then-backward"),
    ("train-step", "zero-step-backward"),
    ("train-step", "zero-between-backward-and-step"),
    ("train-step", "no-step"),
    ("train-step", "no-backward"),
    ("fix-the-loop", "order-fixed-never-clears"),
    ("fix-the-loop", "clears-but-steps-first"),
    ("fix-the-loop", "clears-between-backward-and-step"),
    ("fix-the-loop", "never-steps"),
    ("accumulate-microbatches", "no-zero-grad"),
    ("accumulate-microbatches", "no-scaling"),
    ("accumulate-microbatches", "zero-inside-loop"),
]


def same_line(a: list[float | None], b: list[float | None]) -> bool:
    return len(a) == len(b) and all(
        u is not None and v is not None and within_tolerance(u, v)
        for u, v in zip(a, b, strict=True)
    )


def loss_plots(report: GradeReport) -> list[PlotSeries]:
    return [plot for plot in report.plots if plot.label == "loss"]


def judged(exercise_id: str, body: str) -> GradeReport:
    return judge_source(get_exercise(exercise_id), textwrap.dedent(body).strip() + "\n")


@pytest.mark.parametrize(("exercise_id", "variant_id"), SINGLE_MISTAKES)
def test_a_single_mistake_fixed_is_the_reference_loop(
    grading_runner: sandbox.Runner, exercise_id: str, variant_id: str
) -> None:
    exercise = get_exercise(exercise_id)
    variant = next(v for v in exercise.variants if v.id == variant_id)
    report = grade(exercise_id, variant.source, SHARED_LIMITS, grading_runner)
    assert report.diagnosis == variant.diagnosis
    drawn = [plot for plot in loss_plots(report) if plot.fixed]
    assert drawn, f"no fixed line on any loss chart of {variant_id}"
    for plot in drawn:
        assert plot.fixed_label == fix_label(report.diagnosis)
        assert plot.fixed_label.startswith("your loop")
        assert same_line(plot.fixed, plot.reference), (plot.case, plot.fixed, plot.reference)
        assert not same_line(plot.fixed, plot.learner)
    # Charted on visible cases only, and nothing of a hidden case in the report.
    visible = {spec.id for spec in exercise.cases if not spec.hidden}
    assert {plot.case for plot in report.plots} <= visible
    assert_conceals(exercise, report)


def test_a_line_the_learner_shares_with_the_reference_gets_no_fix() -> None:
    """zero-after-step clears at the end: in the case without stale gradients its first step
    is right, and every later one too; only the stale case's chart differs."""
    exercise = get_exercise("train-step")
    variant = next(v for v in exercise.variants if v.id == "zero-after-step")
    report = judge_source(exercise, variant.source)
    fixed = {plot.case: bool(plot.fixed) for plot in loss_plots(report)}
    assert fixed == {"basic": False, "stale-gradients": True}


def test_two_mistakes_with_one_fixed_is_not_the_reference() -> None:
    """Steps per micro-batch and clears inside the accumulation: the step is fixed, the
    clearing kept, so the line is neither the learner's nor the reference's."""
    exercise = get_exercise("accumulate-microbatches")
    variant = next(v for v in exercise.variants if v.id == "step-per-micro-batch")
    report = judge_source(exercise, variant.source)
    assert report.diagnosis == "step-per-microbatch"
    plot = loss_plots(report)[0]
    assert plot.fixed_label == "your loop stepping after the last micro-batch"
    assert not same_line(plot.fixed, plot.reference)
    assert not same_line(plot.fixed, plot.learner)


def test_a_wrong_learning_rate_is_replayed_with_the_optimizer_s() -> None:
    report = judged(
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            for group in optimizer.param_groups:
                group["lr"] = 0.5
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
    )
    assert report.diagnosis == "wrong-learning-rate"
    for plot in loss_plots(report):
        assert plot.fixed_label == "your loop with the optimizer's learning rate"
        assert same_line(plot.fixed, plot.reference)


def test_a_mistake_only_hidden_cases_show_gets_no_fix_and_no_hidden_number() -> None:
    """Momentum set to zero: right in the visible cases (no momentum), wrong in the hidden one.
    The visible lines are the reference's, so no fix is drawn, and nothing a hidden case holds
    (its momentum, learning rate, values) is anywhere in the report."""
    exercise = get_exercise("train-step")
    report = judged(
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            for group in optimizer.param_groups:
                group["momentum"] = 0.0
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
    )
    assert report.diagnosis == "wrong-momentum"
    assert report.plots and not any(plot.fixed or plot.fixed_label for plot in report.plots)
    # The hidden case is named "momentum", the mistake's own word: its numbers are what count.
    text = report.model_dump_json(exclude={"exercise_version"})
    hidden_ids = {spec.id for spec in exercise.cases if spec.hidden}
    assert not betrayed(set(secrets(exercise)) - hidden_ids, text)


@pytest.mark.parametrize(
    "diagnosis", ["correct", "runtime-error", "not-started", "incorrect", "wrong-return-type"]
)
def test_where_no_single_fix_applies_there_is_no_line(diagnosis: str) -> None:
    assert fix_label(diagnosis) is None


def test_a_loop_that_runs_errors_or_is_right_has_no_fixed_line() -> None:
    exercise = get_exercise("train-step")
    report = judge_source(exercise, exercise.solution_code)
    assert report.diagnosis == "correct"
    assert not any(plot.fixed for plot in report.plots)


@pytest.mark.parametrize(
    ("diagnosis", "calls", "iterations", "micro", "fixed"),
    [
        # One call of a step function is one iteration.
        ("missing-zero-grad", ["backward", "step"], 1, 1, ["zero_grad", "backward", "step"]),
        ("zero-grad-before-step", ["backward", "zero_grad", "step"], 1, 1,
         ["zero_grad", "backward", "step"]),
        ("step-before-backward", ["zero_grad", "step", "backward"], 1, 1,
         ["zero_grad", "backward", "step"]),
        ("missing-backward", ["zero_grad", "step"], 1, 2,
         ["zero_grad", "backward", "backward", "step"]),
        ("backward-twice", ["zero_grad", "backward", "backward", "step"], 1, 1,
         ["zero_grad", "backward", "step"]),
        ("step-twice", ["zero_grad", "backward", "step", "step"], 1, 1,
         ["zero_grad", "backward", "step"]),
        # A whole loop: the step that ends one iteration stays with it.
        ("step-before-backward", ["step", "zero_grad", "backward"] * 2, 2, 1,
         ["zero_grad", "backward", "step"] * 2),
        ("missing-zero-grad", ["backward", "step", "zero_grad", "backward", "step", "zero_grad"],
         2, 1, ["zero_grad", "backward", "step", "zero_grad", "backward", "step", "zero_grad"]),
        # Calls that are not a whole number of backward() per iteration: no fix.
        ("missing-zero-grad", ["backward", "step", "backward", "step", "backward"], 2, 1, None),
    ],
)  # fmt: skip
def test_the_fix_changes_the_calls_where_the_mistake_is_and_nowhere_else(
    diagnosis: str, calls: list[str], iterations: int, micro: int, fixed: list[str] | None
) -> None:
    assert fixed_calls(diagnosis, calls, iterations, micro) == fixed


def test_only_kinds_that_replay_a_loop_get_a_fix() -> None:
    exercise = get_exercise("grad-magnitude")
    assert kind_of(exercise).replay is None
    variant = next(iter(exercise.variants))
    report = judge_source(exercise, variant.source)
    assert not any(plot.fixed for plot in report.plots)


def test_a_fix_of_the_calls_beside_a_wrong_number_gets_no_line() -> None:
    """Never clears and uses its own learning rate: fixing the clear alone would need the
    learner's fitted learning rate, which may come from a hidden case; no line is drawn."""
    report = judged(
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            for group in optimizer.param_groups:
                group["lr"] = 0.5
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
    )
    assert report.diagnosis == "missing-zero-grad"
    assert "wrong-learning-rate" in report.feedback
    assert report.plots and not any(plot.fixed for plot in report.plots)
