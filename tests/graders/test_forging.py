"""Invariant 1: nothing a submission does inside the sandbox can raise its score.

Each forging attempt wraps a known bug (missing zero_grad, 3 points of 10 honestly): the score
must not rise above what the bug earns on its own.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import sandbox
from graders import grade

BUG = (
    Path(__file__).resolve().parents[2] / "exercises/train-step/bugs/no_zero_grad.py"
).read_text()


@pytest.fixture(scope="module")
def honest_score(grading_runner: sandbox.Runner) -> float:
    report = grade("train-step", BUG, runner=grading_runner)
    assert report.diagnosis == "missing-zero-grad"
    return report.score


FORGERIES = {
    "prints a fake passing result": """
        import json
        print(json.dumps({"score": 10, "max_score": 10, "diagnosis": "correct", "passed": True}))
    """,
    "patches torch comparisons": """
        import torch
        torch.allclose = lambda *a, **k: True
        torch.equal = lambda *a, **k: True
        torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
    """,
    "patches json.dumps and print": """
        import builtins, json
        json.dumps = lambda *a, **k: '{"status": "ran", "cases": [], "score": 10}'
        builtins.print = lambda *a, **k: None
    """,
    "scans gc objects and frames for expected weights": """
        import gc, sys
        found = [o for o in gc.get_objects() if type(o).__name__ in ("GradeReport", "CaseTrace")]
        frame = sys._getframe()
        while frame is not None:
            found += [k for k in frame.f_locals if "reference" in k or "expected" in k]
            frame = frame.f_back
        assert not found, found
    """,
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forgery_does_not_raise_the_score(
    name: str, honest_score: float, grading_runner: sandbox.Runner
) -> None:
    report = grade(
        "train-step", textwrap.dedent(FORGERIES[name]) + "\n" + BUG, runner=grading_runner
    )
    assert report.score <= honest_score


def test_a_forged_trace_on_the_result_channel_scores_nothing(
    grading_runner: sandbox.Runner,
) -> None:
    forged = textwrap.dedent("""
        import json, os
        os.write(3, json.dumps({"status": "ran", "cases": [], "score": 10}).encode())
        os._exit(0)
    """)
    report = grade("train-step", forged + BUG, runner=grading_runner)
    assert report.score == 0
    assert report.diagnosis == "runtime-error"


def test_exiting_early_with_status_zero_scores_nothing(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        textwrap.dedent("""
            import sys

            def train_step(model, optimizer, loss_fn, x, y):
                sys.exit(0)
        """),
        runner=grading_runner,
    )
    assert report.score == 0
    assert report.diagnosis == "runtime-error"


def test_os_exit_after_a_correct_first_step_scores_nothing(grading_runner: sandbox.Runner) -> None:
    report = grade(
        "train-step",
        textwrap.dedent("""
            import os
            calls = 0

            def train_step(model, optimizer, loss_fn, x, y):
                global calls
                calls += 1
                if calls == 2:
                    os._exit(0)
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.item()
        """),
        runner=grading_runner,
    )
    assert report.score == 0
    assert "before every step was checked" in report.feedback
