"""Every message shown to a learner is true of their code: real mistakes (from public bug reports
and forum threads, adapted to the exercises) graded through the warm pool, each checked for
its diagnosis and for the words it is told, the false ones it once was told among them."""

from __future__ import annotations

import textwrap
import threading
from dataclasses import dataclass
from typing import Any

import pytest

import sandbox
from graders import grade, harness
from graders.exercises import get_exercise
from graders.kinds import kind_of
from graders.report import GradeReport
from tests.graders.conftest import SHARED_LIMITS


@dataclass(frozen=True)
class Mistake:
    name: str
    exercise: str
    source: str
    diagnosis: str
    said: tuple[str, ...]  # in the feedback
    unsaid: tuple[str, ...] = ()  # never in the feedback: false of this code
    score: float | None = None


MISTAKES = [
    Mistake(
        "loss detached, requires_grad set to silence the error",
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y).detach()
            loss.requires_grad = True
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
        "loss-detached",
        ("cut off from the model", "does not reconnect the graph"),
        ("never calls", "No backward pass"),
    ),
    Mistake(
        "loss taken from .data, requires_grad_() to silence the error",
        "fix-the-loop",
        """
        def train(model, optimizer, loss_fn, batches, epochs):
            losses = []
            for epoch in range(epochs):
                for x, y in batches:
                    optimizer.zero_grad()
                    loss = loss_fn(model(x), y).data.requires_grad_()
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
            return losses
        """,
        "loss-detached",
        ("cut off from the model",),
        ("never calls",),
    ),
    Mistake(
        "optimizer made anew in every step",
        "train-step",
        """
        import torch

        def train_step(model, optimizer, loss_fn, x, y):
            group = optimizer.param_groups[0]
            optimizer = torch.optim.SGD(
                model.parameters(), lr=group["lr"], momentum=group["momentum"]
            )
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
        "optimizer-recreated",
        ("makes an optimizer of its own", "momentum"),
        ("by hand",),
    ),
    Mistake(
        "backward given the loss as its gradient",
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward(loss)
            optimizer.step()
            return loss.item()
        """,
        "gradients-times-loss",
        ("multiplied by the loss itself", "`loss.backward()` with no argument"),
    ),
    Mistake(
        "forward pass under no_grad",
        "train-step",
        """
        import torch

        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            with torch.no_grad():
                prediction = model(x)
            loss = loss_fn(prediction, y)
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
        "runtime-error",
        ("does not depend on the model's parameters", "torch.no_grad()"),
        # The harness's watch of backward() is not in the learner's traceback.
        ("main.py", "harness.py", "watched_backward", "handle_torch_function"),
    ),
    Mistake(
        "a second backward on a freed graph",
        "fix-the-loop",
        """
        def train(model, optimizer, loss_fn, batches, epochs):
            losses = []
            for epoch in range(epochs):
                for x, y in batches:
                    optimizer.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
            return losses
        """,
        "runtime-error",
        ("`retain_graph=True`, would silence the error but not fix the loop", "doubling them"),
        ("main.py", "harness.py", "watched_backward", "handle_torch_function"),
    ),
    Mistake(
        "loss tensors kept in the history",
        "fix-the-loop",
        """
        def train(model, optimizer, loss_fn, batches, epochs):
            losses = []
            for epoch in range(epochs):
                for x, y in batches:
                    optimizer.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    optimizer.step()
                    losses.append(loss)
            return losses
        """,
        "wrong-return-type",
        ("a list of `Tensor` values, not of floats", "keeps its whole graph alive"),
        score=9,
    ),
    Mistake(
        ".grad read before any backward made it",
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            for parameter in model.parameters():
                parameter.grad.zero_()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.item()
        """,
        "grad-none-error",
        ("no `backward()` had filled it yet, or it had been cleared",),
        ("so `.grad` is `None` until the next `backward()`",),
    ),
    Mistake(
        "cleared at the end of the step",
        "train-step",
        """
        def train_step(model, optimizer, loss_fn, x, y):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss.item()
        """,
        "missing-zero-grad",
        ("clears the gradients after `step()`", "case `stale-gradients` hands your code"),
    ),
    Mistake(
        "clearing skipped on some batches of a whole loop",
        "fix-the-loop",
        """
        def train(model, optimizer, loss_fn, batches, epochs):
            losses = []
            for epoch in range(epochs):
                for i, (x, y) in enumerate(batches):
                    if i % 2 == 0:
                        optimizer.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
            return losses
        """,
        "zero-grad-skipped",
        ("some batches", "for every batch"),
        ("every call", "some calls"),
    ),
    Mistake(
        "two steps after the micro-batches",
        "accumulate-microbatches",
        """
        def accumulated_step(model, optimizer, loss_fn, micro_batches):
            optimizer.zero_grad()
            total = 0.0
            for x, y in micro_batches:
                loss = loss_fn(model(x), y) / len(micro_batches)
                loss.backward()
                total += loss.item()
            optimizer.step()
            optimizer.step()
            return total
        """,
        "step-twice",
        ("after the last micro-batch's `backward()`",),
        ("Step once, after `backward()`",),
    ),
]


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.name)
def test_a_real_mistake_is_named_and_told_in_true_words(
    mistake: Mistake, grading_runner: sandbox.Runner
) -> None:
    source = textwrap.dedent(mistake.source).strip() + "\n"
    report: GradeReport = grade(mistake.exercise, source, SHARED_LIMITS, grading_runner)
    assert report.diagnosis == mistake.diagnosis, report.feedback
    assert report.score < report.max_score
    if mistake.score is not None:
        assert report.score == mistake.score, report.feedback
    # What the learner reads: the feedback and the checks' messages (each point said once).
    shown = "\n\n".join([report.feedback, *(c.message for c in report.checks)])
    for words in mistake.said:
        assert words in shown, (words, shown)
    for words in mistake.unsaid:
        assert words not in shown, (words, shown)


@pytest.mark.parametrize("in_another_thread", [False, True])
def test_a_detached_backward_is_recorded_in_its_own_case_only(in_another_thread: bool) -> None:
    """The watch is this thread's: a grader running cases in threads records each its own."""
    exercise = get_exercise("train-step")

    def train_step(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> float:
        def detached() -> None:
            loss_fn(model(x), y).detach().requires_grad_().backward()

        if in_another_thread:
            thread = threading.Thread(target=detached)
            thread.start()
            thread.join()
        else:
            detached()
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return float(loss.item())

    document = harness.run_case(
        kind_of(exercise).record, train_step, exercise.cases[0].harness_spec()
    )
    assert document["error"] is None
    for record in document["records"]:
        expected = ["zero_grad", "backward", "step"]
        if not in_another_thread:
            expected.insert(0, "detached_backward")
        assert record["calls"] == expected
