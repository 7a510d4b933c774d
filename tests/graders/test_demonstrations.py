"""Demonstrations must be demonstrated: where an exercise asks the learner to show or to do a
behaviour, the recorded calls must show it, not only the values it would give."""

from __future__ import annotations

import textwrap

import pytest

from graders.exercises import get_exercise
from graders.proving import judge_source

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
    assert "ran backward() once" in report.feedback
