"""Invariant 5 through the diagnosis: code that is right in the visible cases and wrong only in
hidden ones is fitted by every model there, and no number of the fit reaches the learner.

Each submission below deviates in the hidden cases alone (it tells them by their shapes, which
the visible cases show it) by an amount it takes from the hidden case itself: its shape, or its
initial weight, which its seed chose. The same deviation keyed two ways must give the same
report, word for word and number for number: what differs between the two is hidden data. And
no rendering of a hidden-derived number may appear anywhere in the report.
"""

from __future__ import annotations

import re
import textwrap

import pytest

import sandbox
from graders import grade
from graders.exercise import Exercise
from graders.exercises import get_exercise
from graders.feedback import diagnosis_words
from graders.judging import case_data
from graders.proving import judge_source
from graders.report import GradeReport
from tests.graders.test_hidden import SANDBOX_LIMITS, betrayed, secrets

# Every exercise's visible cases have these (in_features, out_features); no hidden case does.
PRELUDE = """
VISIBLE_SHAPES = {(4, 1), (3, 2)}

def hidden_k(model):
    # None in a visible case; in a hidden one, a number of that case's own.
    if (model.in_features, model.out_features) in VISIBLE_SHAPES:
        return None
    if "_k" not in model.__dict__:
        model.__dict__["_k"] = KEY(model)
    return model.__dict__["_k"]
"""
# Two ways to take a number from a hidden case: its shape, and its seed (through the weights).
KEYS = {
    "shape": "KEY = lambda model: 1 + model.in_features / 8 + model.out_features / 64",
    "seed": "KEY = lambda model: 1.3 + abs(model.weight[0, 0].item())",
}


def key_values(exercise: Exercise) -> list[float]:
    """What each KEY gives in each hidden case of the exercise."""
    values = []
    for spec in exercise.cases:
        if spec.hidden:
            values.append(1 + spec.in_features / 8 + spec.out_features / 64)
            values.append(1.3 + abs(case_data(spec).weight[0, 0].item()))
    return values


TRAIN_STEP = """
def train_step(model, optimizer, loss_fn, x, y):
    k = hidden_k(model)
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    {deviation}
    optimizer.step()
    return loss.item()
"""
MICRO_BATCHES = """
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    k = hidden_k(model)
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) / ({divisor})
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
"""
WHOLE_LOOP = """
def train(model, optimizer, loss_fn, batches, epochs):
    k = hidden_k(model)
    if k:
        {before}
    losses = []
    for epoch in range(epochs):
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            if k:
                {after_backward}
            optimizer.step()
            losses.append(loss.item())
    return losses
"""
MAGNITUDE = """
def total_grad_magnitude(model):
    k = hidden_k(model)
    total = 0.0
    for parameter in model.parameters():
        if parameter.grad is not None:
            total += {term}.item()
            if k:
                {after}
    return total * {factor}
"""
# deviation -> (exercise, source)
DEVIATIONS: dict[str, tuple[str, str]] = {
    "gradients scaled": (
        "train-step",
        TRAIN_STEP.format(
            deviation="if k:\n        for p in model.parameters():\n            p.grad *= k"
        ),
    ),
    "updates scaled (learning rate times k)": (
        "train-step",
        TRAIN_STEP.format(
            deviation="if k:\n"
            "        group = optimizer.param_groups[0]\n"
            "        group.setdefault('base', group['lr'])\n"
            "        group['lr'] = group['base'] * k"
        ),
    ),
    "a learning rate of its own": (
        "train-step",
        TRAIN_STEP.format(deviation="if k:\n        optimizer.param_groups[0]['lr'] = k / 50"),
    ),
    "backward run k times": (
        "train-step",
        TRAIN_STEP.format(
            deviation="if k:\n"
            "        for _ in range(1 + int(k * 4) % 3):\n"
            "            loss_fn(model(x), y).backward()"
        ),
    ),
    "a step skipped at a call chosen by k": (
        "train-step",
        """
def train_step(model, optimizer, loss_fn, x, y):
    k = hidden_k(model)
    model.__dict__["calls"] = model.__dict__.get("calls", 0) + 1
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    if not k or model.__dict__["calls"] != 1 + int(k * 10) % 3:
        optimizer.step()
    return loss.item()
""",
    ),
    "clearing skipped at a call chosen by k": (
        "train-step",
        """
def train_step(model, optimizer, loss_fn, x, y):
    k = hidden_k(model)
    model.__dict__["calls"] = model.__dict__.get("calls", 0) + 1
    if not k or model.__dict__["calls"] != 1 + int(k * 10) % 3:
        optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
""",
    ),
    "micro-batch loss divided by k": (
        "accumulate-microbatches",
        MICRO_BATCHES.format(divisor="k if k else len(micro_batches)"),
    ),
    "a whole loop's gradients scaled": (
        "fix-the-loop",
        WHOLE_LOOP.format(before="pass", after_backward="for p in model.parameters(): p.grad *= k"),
    ),
    "a whole loop's learning rate": (
        "fix-the-loop",
        WHOLE_LOOP.format(before='optimizer.param_groups[0]["lr"] *= k', after_backward="pass"),
    ),
    "copies after k passes": (
        "prove-accumulation",
        """
def accumulation_demo(model, loss_fn, x, y):
    k = hidden_k(model)
    passes = int(k * 3) if k else 2
    loss_fn(model(x), y).backward()
    first = model.weight.grad.clone()
    for _ in range(passes - 1):
        loss_fn(model(x), y).backward()
    return first, model.weight.grad.clone()
""",
    ),
    "a magnitude times k": (
        "grad-magnitude",
        MAGNITUDE.format(term="parameter.grad.abs().sum()", after="pass", factor="(k or 1)"),
    ),
    "gradients scaled by a function that should only read them": (
        "grad-magnitude",
        MAGNITUDE.format(
            term="parameter.grad.abs().sum()", after="parameter.grad *= k", factor="1"
        ),
    ),
}
# Hidden-only deviations whose amount is not a number (the same for both keys): the report
# still names nothing of the hidden case.
FIXED = {
    "momentum dropped": (
        "train-step",
        TRAIN_STEP.format(deviation="if k:\n        optimizer.param_groups[0]['momentum'] = 0.0"),
    ),
    "loss read after the update": (
        "train-step",
        """
def train_step(model, optimizer, loss_fn, x, y):
    k = hidden_k(model)
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss_fn(model(x), y).item() if k else loss.item()
""",
    ),
    "micro-batch losses not divided": (
        "accumulate-microbatches",
        MICRO_BATCHES.format(divisor="1 if k else len(micro_batches)"),
    ),
    "absolute value missing": (
        "grad-magnitude",
        MAGNITUDE.format(
            term="(parameter.grad.sum() if k else parameter.grad.abs().sum())",
            after="pass",
            factor="1",
        ),
    ),
}


# What a stepping function does when it "does nothing": it computes its gradients and never
# steps. Done in every case but one hidden case, no other case pins down a learning rate or a
# scale, so a model fitted on that hidden case explains every case.
IDLE = {
    "train-step": """
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss.item()
    """,
    "accumulate-microbatches": """
        optimizer.zero_grad()
        for x, y in micro_batches:
            (loss_fn(model(x), y) / len(micro_batches)).backward()
        return sum(loss_fn(model(x), y).item() for x, y in micro_batches) / len(micro_batches)
    """,
    "fix-the-loop": """
        losses = []
        for epoch in range(epochs):
            for x, y in batches:
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                losses.append(loss.item())
        return losses
    """,
}
# Or it only clears: then no case pins down a gradient's scale either.
CLEARS = {
    "train-step": """
        optimizer.zero_grad()
        return loss_fn(model(x), y).item()
    """,
    "accumulate-microbatches": """
        optimizer.zero_grad()
        return sum(loss_fn(model(x), y).item() for x, y in micro_batches) / len(micro_batches)
    """,
    "fix-the-loop": """
        losses = []
        for epoch in range(epochs):
            for x, y in batches:
                optimizer.zero_grad()
                losses.append(loss_fn(model(x), y).item())
        return losses
    """,
}
IDLES = {"idle": IDLE, "clears": CLEARS}
CALL = "k = hidden_k(model)\n"


def source(body: str, key: str, idle_in: Exercise | None = None, idle: str = "idle") -> str:
    """The submission with its amount keyed on `key`. With `idle_in`, it deviates in that
    exercise's first hidden case alone and does nothing (IDLES[idle]) in every other case."""
    body = textwrap.dedent(body)
    prelude = textwrap.dedent(PRELUDE) + KEYS[key] + "\n"
    if idle_in is not None:
        target = next(spec for spec in idle_in.cases if spec.hidden)
        prelude += (
            f"TARGET = ({target.in_features}, {target.out_features})\n"
            "_hidden_k = hidden_k\n"
            "def hidden_k(model):\n"
            "    if (model.in_features, model.out_features) != TARGET:\n"
            "        return None\n"
            "    return _hidden_k(model)\n"
        )
        nothing = textwrap.indent(textwrap.dedent(IDLES[idle][idle_in.id]).strip(), "        ")
        assert CALL in body
        body = body.replace(CALL, f"{CALL}    if k is None:\n{nothing}\n")
    return prelude + body


def renderings(value: float) -> set[str]:
    """How a note writes a number (`:.4g`), and longer (three digits meet a visible value by
    chance: the page's chart describes a visible loss of 0.566)."""
    return {f"{value:.{digits}g}" for digits in (4, 5, 6)} | {repr(value)}


def assert_no_hidden_number(exercise: Exercise, report: GradeReport) -> None:
    """No hidden case parameter or value (test_hidden.secrets), and no rendering of a number
    the submission took from a hidden case, nor of it times or over a hidden learning rate."""
    # The explanation of a diagnosis is the lesson's, the same for everyone (a hidden case's id
    # may be a word in it: "momentum"); the codes are from a fixed set.
    feedback = report.feedback
    for code in [report.diagnosis, *report.other_diagnoses]:
        feedback = feedback.replace(diagnosis_words(code, exercise), "")
    shown = report.model_copy(update={"feedback": feedback})
    assert_no_hidden_text(
        exercise,
        shown.model_dump_json(exclude={"exercise_version", "diagnosis", "other_diagnoses"}),
    )


def assert_no_hidden_text(exercise: Exercise, text: str) -> None:
    """`text` (a report, a page, an API answer) holds nothing derived from a hidden case."""
    # A one-digit seed is in every score.
    assert not betrayed([secret for secret in secrets(exercise) if len(secret) >= 2], text)
    hidden_lrs = [spec.lr for spec in exercise.cases if spec.hidden]
    for k in key_values(exercise):
        derived = [k, k - 1, 1 / k, k / 50]
        derived += [k * lr for lr in hidden_lrs] + [lr / k for lr in hidden_lrs]
        for value in derived:
            for shown in renderings(value):
                if len(shown.strip("0.-")) >= 2:  # "1.5" or more digits, not a bare "2"
                    assert not re.search(rf"(?<![\d.]){re.escape(shown)}(?!\d)", text), shown


@pytest.mark.parametrize("visible", ["right", *IDLES])
@pytest.mark.parametrize("name", sorted(DEVIATIONS))
def test_a_deviation_in_hidden_cases_alone_is_told_with_no_number_of_them(
    name: str, visible: str
) -> None:
    exercise_id, body = DEVIATIONS[name]
    if visible in IDLES and exercise_id not in IDLE:
        pytest.skip("a kind that does not step: doing nothing is no loop to fit")
    exercise = get_exercise(exercise_id)
    idle_in = exercise if visible in IDLES else None
    reports = {key: judge_source(exercise, source(body, key, idle_in, visible)) for key in KEYS}
    for report in reports.values():
        assert report.score < exercise.max_score, report.feedback  # the deviation is caught
        assert_no_hidden_number(exercise, report)
    # The amount came from the hidden case: nothing in the report may depend on it.
    assert reports["shape"].model_dump() == reports["seed"].model_dump()


@pytest.mark.parametrize("name", sorted(FIXED))
def test_a_fixed_deviation_in_hidden_cases_alone_names_nothing_of_them(name: str) -> None:
    exercise_id, body = FIXED[name]
    exercise = get_exercise(exercise_id)
    report = judge_source(exercise, source(body, "shape"))
    assert report.score < exercise.max_score, report.feedback
    assert_no_hidden_number(exercise, report)


def test_the_visible_cases_fit_is_still_said() -> None:
    """The same deviation in every case is told with its number, fitted on a visible case."""
    exercise = get_exercise("train-step")
    body = TRAIN_STEP.format(deviation="for p in model.parameters():\n        p.grad *= 1.375")
    report = judge_source(exercise, "hidden_k = lambda model: None\n" + textwrap.dedent(body))
    assert report.diagnosis == "gradients-scaled", report.feedback
    assert "exactly 1.375 times the correct ones" in report.feedback


@pytest.mark.parametrize("name", ["gradients scaled", "updates scaled (learning rate times k)"])
def test_through_the_sandbox_the_report_holds_no_hidden_number(
    name: str, grading_runner: sandbox.Runner
) -> None:
    exercise_id, body = DEVIATIONS[name]
    exercise = get_exercise(exercise_id)
    reports = [
        grade(
            exercise_id,
            source(body, key, exercise, "clears"),
            limits=SANDBOX_LIMITS,
            runner=grading_runner,
        )
        for key in KEYS
    ]
    for report in reports:
        assert report.score < exercise.max_score
        assert_no_hidden_number(exercise, report)
    assert reports[0].model_dump() == reports[1].model_dump()
