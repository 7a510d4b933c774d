"""Demonstrations must be demonstrated: where an exercise asks the learner to show or to do a
behaviour, the recorded calls must show it, not only the values it would give."""

from __future__ import annotations

import textwrap

import pytest

import sandbox
from graders import grade
from graders.exercises import get_exercise
from graders.proving import judge_source
from tests.graders.conftest import SHARED_LIMITS, ColdGrade

DEMO = get_exercise("prove-accumulation")

FAKES = {
    "one pass, doubled by hand": """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            g = model.weight.grad.clone()
            return g, 2 * g
    """,
    "two passes cleared between by assignment, doubled by hand": """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            g = model.weight.grad.clone()
            model.weight.grad = None
            loss_fn(model(x), y).backward()
            return g, model.weight.grad + g
    """,
    "two passes with zero_grad between, doubled by hand": """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            g = model.weight.grad.clone()
            model.zero_grad()
            loss_fn(model(x), y).backward()
            return g, 2 * model.weight.grad.clone()
    """,
    "three passes, scaled by hand": """
        def accumulation_demo(model, loss_fn, x, y):
            for _ in range(3):
                loss_fn(model(x), y).backward()
            g = model.weight.grad.clone() / 3
            return g, 2 * g
    """,
}


@pytest.mark.parametrize("name", sorted(FAKES))
def test_gradients_computed_beside_the_accumulation_do_not_prove_it(name: str) -> None:
    report = judge_source(DEMO, textwrap.dedent(FAKES[name]))
    double = next(c for c in report.checks if c.id == "second-is-double")
    assert not double.passed, double.message
    assert report.score <= DEMO.max_score - DEMO.checks["second-is-double"]


def test_clearing_after_both_passes_still_proves_it() -> None:
    report = judge_source(
        DEMO,
        textwrap.dedent("""
            def accumulation_demo(model, loss_fn, x, y):
                loss_fn(model(x), y).backward()
                first = model.weight.grad.clone()
                loss_fn(model(x), y).backward()
                second = model.weight.grad.clone()
                model.zero_grad()
                return first, second
        """),
    )
    assert report.diagnosis == "correct", report.feedback
    assert report.score == DEMO.max_score


def test_the_fake_is_told_why() -> None:
    report = judge_source(DEMO, textwrap.dedent(FAKES["one pass, doubled by hand"]))
    double = next(c for c in report.checks if c.id == "second-is-double")
    assert "ran backward() once" in double.message
    # Said once, by the check; the feedback points at it.
    assert "ran backward() once" not in report.feedback
    assert "`second-is-double`" in report.feedback


# Calls that look like backward() to a hook any autograd call fires, but accumulate nothing into
# `.grad` (issue 34): each scored 10/10 while a tensor hook counted the passes. A `backward` is
# counted from the weight's own accumulation (graders.harness.CallRecorder).
FORGED_DEMOS = {
    "autograd.grad for the second pass": """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            first = model.weight.grad.clone()
            torch.autograd.grad(loss_fn(model(x), y), [model.weight])
            model.weight.grad += first
            return first, model.weight.grad.clone()
    """,
    "autograd.grad on a retained graph": """
        def accumulation_demo(model, loss_fn, x, y):
            loss = loss_fn(model(x), y)
            loss.backward(retain_graph=True)
            first = model.weight.grad.clone()
            torch.autograd.grad(loss, [model.weight, model.bias])
            model.weight.grad += first
            return first, model.weight.grad.clone()
    """,
    "the hooks called by hand": """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            first = model.weight.grad.clone()
            model.weight.grad += first
            for hook in list(model.weight._backward_hooks.values()):
                hook(first)
            for hook in list(model.weight._post_accumulate_grad_hooks.values()):
                hook(model.weight)
            return first, model.weight.grad.clone()
    """,
    "the hooks called by hand inside another backward pass": """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            first = model.weight.grad.clone()

            def forge(grad):
                for hook in list(model.weight._backward_hooks.values()):
                    hook(first)
                for hook in list(model.weight._post_accumulate_grad_hooks.values()):
                    hook(model.weight)
                return grad

            z = torch.ones(1, requires_grad=True)
            (z * 1.0).register_hook(forge)
            out = z * 1.0
            out.register_hook(forge)
            out.sum().backward()
            model.weight.grad = 2 * first
            return first, model.weight.grad.clone()
    """,
    ".grad assigned, then a pass of a zero loss": """
        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            first = model.weight.grad.clone()
            (0.0 * loss_fn(model(x), y)).backward()
            model.weight.grad = 2 * first
            return first, model.weight.grad.clone()
    """,
}
# accumulate-microbatches is judged by its values alone (one backward() on the concatenated batch
# gives them: tests/graders/test_unit.py), so forging its calls gains nothing there.
FORGERIES = [("prove-accumulation", name, body) for name, body in FORGED_DEMOS.items()]
DEMONSTRATION_CHECK = {"prove-accumulation": "second-is-double"}


def forged_source(body: str) -> str:
    return "import torch\n" + textwrap.dedent(body)


@pytest.mark.parametrize(("exercise_id", "name", "body"), FORGERIES, ids=[f[1] for f in FORGERIES])
def test_a_pass_that_accumulated_nothing_is_no_backward(
    exercise_id: str, name: str, body: str
) -> None:
    exercise = get_exercise(exercise_id)
    report = judge_source(exercise, forged_source(body))
    demonstrated = next(c for c in report.checks if c.id == DEMONSTRATION_CHECK[exercise_id])
    assert not demonstrated.passed, demonstrated.message
    assert "ran backward() once" in demonstrated.message
    assert report.score <= exercise.max_score - exercise.checks[demonstrated.id]


@pytest.mark.parametrize("backend", ["warm pool", "cold"])
@pytest.mark.parametrize(("exercise_id", "name", "body"), FORGERIES, ids=[f[1] for f in FORGERIES])
def test_forged_passes_are_no_backward_in_the_sandbox(
    exercise_id: str,
    name: str,
    body: str,
    backend: str,
    grading_runner: sandbox.Runner,
    cold_grade: ColdGrade,
) -> None:
    exercise = get_exercise(exercise_id)
    source = forged_source(body)
    if backend == "cold":
        report = cold_grade(exercise_id, source)
    else:
        report = grade(exercise_id, source, SHARED_LIMITS, grading_runner)
    demonstrated = next(c for c in report.checks if c.id == DEMONSTRATION_CHECK[exercise_id])
    assert not demonstrated.passed, report.feedback
    assert report.score <= exercise.max_score - exercise.checks[demonstrated.id]


def test_real_passes_on_a_retained_graph_are_backward_passes() -> None:
    """Two backward() passes over one graph kept with retain_graph accumulate, and prove it."""
    report = judge_source(
        DEMO,
        forged_source("""
            def accumulation_demo(model, loss_fn, x, y):
                loss = loss_fn(model(x), y)
                loss.backward(retain_graph=True)
                first = model.weight.grad.clone()
                loss.backward()
                return first, model.weight.grad.clone()
        """),
    )
    assert report.diagnosis == "correct", report.feedback
