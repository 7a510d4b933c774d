"""Invariant 1: nothing a submission does inside the sandbox can raise its score.

Each forging attempt wraps a known bug (missing zero_grad, 3 points of 10 honestly): the score
must not rise above what the bug earns on its own.
"""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest

import sandbox
from graders import grade
from tests.graders.conftest import ColdGrade

EXERCISES = Path(__file__).resolve().parents[2] / "exercises"
BUG = (EXERCISES / "train-step/bugs/no_zero_grad.py").read_text()


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


# -- checks decided by what the harness records in the sandbox (DESIGN.md, invariant 9) --------
# Each forgery blinds or bypasses what the harness records. It must score no more than its
# honest counterpart (the same code without the blinding), or fail the checks named.

EVALUATE_NO_NO_GRAD = """
def evaluate(model, loss_fn, x, y):
    model.eval()
    loss = loss_fn(model(x), y).item()
    model.train()
    return loss
"""
EVALUATE_NO_EVAL = (EXERCISES / "evaluate/bugs/no_eval.py").read_text()
# What a checkpoint holding nothing earns honestly: `runs` and `returns-dict`, no other check.
NOTHING_RESUMED = ("model-restored", "optimizer-restored", "training-continues")

BLINDED: dict[str, tuple[str, str, str | tuple[str, ...]]] = {
    "evaluate: is_grad_enabled replaced around the forward": (
        "evaluate",
        """
        import torch

        def evaluate(model, loss_fn, x, y):
            model.eval()
            real = torch.is_grad_enabled
            torch.is_grad_enabled = lambda: False
            try:
                loss = loss_fn(model(x), y).item()
            finally:
                torch.is_grad_enabled = real
            model.train()
            return loss
        """,
        EVALUATE_NO_NO_GRAD,
    ),
    "evaluate: hooks cleared, dropout active in training mode": (
        "evaluate",
        """
        import torch

        def evaluate(model, loss_fn, x, y):
            for module in model.modules():
                module._forward_pre_hooks.clear()
                module._forward_hooks.clear()
            with torch.no_grad():
                return loss_fn(model(x), y).item()
        """,
        EVALUATE_NO_EVAL,
    ),
    "evaluate: hooks cleared, p = 0 in training mode, a graph recorded": (
        "evaluate",
        """
        import torch

        def evaluate(model, loss_fn, x, y):
            for module in model.modules():
                module._forward_pre_hooks.clear()
            dropout = model[2]
            p, dropout.p = dropout.p, 0.0
            loss = loss_fn(model(x), y).item()
            dropout.p = p
            return loss
        """,
        """
        def evaluate(model, loss_fn, x, y):
            dropout = model[2]
            p, dropout.p = dropout.p, 0.0
            loss = loss_fn(model(x), y).item()
            dropout.p = p
            return loss
        """,
    ),
    "evaluate: the hooks called by hand in evaluation mode, the forward in training mode": (
        "evaluate",
        """
        import torch

        def evaluate(model, loss_fn, x, y):
            dropout = model[2]
            hooks = list(dropout._forward_pre_hooks.values())
            dropout._forward_pre_hooks.clear()
            model.eval()
            with torch.no_grad():
                for hook in hooks:
                    hook(dropout, (x,))
            model.train()
            return loss_fn(model(x), y).item()
        """,
        """
        def evaluate(model, loss_fn, x, y):
            return loss_fn(model(x), y).item()
        """,
    ),
    "resume: save returns {}, resume copies from the live pair kept in a global": (
        "resume-training",
        """
        LIVE = []

        def save(model, optimizer):
            LIVE.append((model, optimizer))
            return {}

        def resume(model, optimizer, state):
            saved_model, saved_optimizer = LIVE[-1]
            model.load_state_dict(saved_model.state_dict())
            optimizer.load_state_dict(saved_optimizer.state_dict())
        """,
        NOTHING_RESUMED,
    ),
    "resume: save returns {}, state dicts kept in a global": (
        "resume-training",
        """
        KEPT = {}

        def save(model, optimizer):
            KEPT.update(model=model.state_dict(), optimizer=optimizer.state_dict())
            return {}

        def resume(model, optimizer, state):
            model.load_state_dict(KEPT["model"])
            optimizer.load_state_dict(KEPT["optimizer"])
        """,
        NOTHING_RESUMED,
    ),
    "resume: save returns {}, resume copies from the harness's frames": (
        "resume-training",
        """
        import sys
        import torch

        def save(model, optimizer):
            return {}

        def resume(model, optimizer, state):
            frame = sys._getframe(1)
            while frame is not None:
                for value in list(frame.f_locals.values()):
                    other = getattr(value, "model", None)
                    if isinstance(other, torch.nn.Linear) and other is not model:
                        model.load_state_dict(other.state_dict())
                        optimizer.load_state_dict(value.optimizer.state_dict())
                        return
                frame = frame.f_back
        """,
        NOTHING_RESUMED,
    ),
    "resume: save returns {}, resume copies from what gc finds": (
        "resume-training",
        """
        import gc
        import torch

        def save(model, optimizer):
            return {}

        def resume(model, optimizer, state):
            for value in gc.get_objects():
                if isinstance(value, torch.optim.Optimizer) and value is not optimizer:
                    other = value.param_groups[0]["params"][0]
                    if other.shape == model.weight.shape and value.state:
                        optimizer.load_state_dict(value.state_dict())
                if isinstance(value, torch.nn.Linear) and value is not model:
                    if value.weight.shape == model.weight.shape:
                        model.load_state_dict(value.state_dict())
        """,
        NOTHING_RESUMED,
    ),
    "resume: save returns {}, a copy kept in the process is read once": (
        "resume-training",
        """
        import copy

        KEPT = []

        def save(model, optimizer):
            KEPT.append(copy.deepcopy((model.state_dict(), optimizer.state_dict())))
            return {}

        def resume(model, optimizer, state):
            weights, moments = KEPT.pop()
            model.load_state_dict(weights)
            optimizer.load_state_dict(moments)
        """,
        NOTHING_RESUMED,
    ),
}


@pytest.mark.parametrize("name", sorted(BLINDED))
def test_what_the_code_can_blind_raises_no_score(
    name: str, grading_runner: sandbox.Runner, cold_grade: ColdGrade
) -> None:
    exercise, forged, honest = BLINDED[name]
    forged = textwrap.dedent(forged)
    for graded in (functools.partial(grade, runner=grading_runner), cold_grade):
        report = graded(exercise, forged)
        if isinstance(honest, str):
            assert report.score <= graded(exercise, textwrap.dedent(honest)).score, report.feedback
        else:
            passed = [c.id for c in report.checks if c.passed and c.id in honest]
            assert not passed, report.feedback
        if "dropout active" in name:
            eval_mode = next(c for c in report.checks if c.id == "eval-mode")
            assert not eval_mode.passed, report.feedback
