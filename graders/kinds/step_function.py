"""The `step-function` kind: a function called once per batch that zeroes, backpropagates and steps.

Its cases give it one batch a call (`train_step(model, optimizer, loss_fn, x, y)`), or a list of
equal-size micro-batches a call (`micro_batches`), whose single update must equal one step on
their concatenation. The harness records the state after each call.
Every step is judged twice: against the reference loop's weights (global), and on its own,
from the learner's weights before it (local), so the messages can say which step went wrong
first and how.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from graders.exercises import CaseSpec
from graders.feedback import learner_text
from graders.fitting import stepping_models
from graders.harness import (
    CallRecorder,
    Record,
    build_case,
    number_of,
    parameters_of,
    type_name,
    values_of,
)
from graders.judging import (
    CaseFindings,
    KindJudge,
    as_tensor,
    batch_of,
    case_data,
    cleared,
    close,
    close_values,
    difference,
    loss_and_gradients,
    plot_series,
    times,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.replay import PER_CALL
from graders.report import PlotSeries
from graders.trace import PARAMETERS, CaseTrace, TraceShape


def record_steps(function: Callable[..., Any], spec: dict[str, Any], records: list[Record]) -> None:
    """One call per input, the state after each (run in the sandbox too: harness names only)."""
    case = build_case(spec)
    model, optimizer = case.model, case.optimizer
    recorder = CallRecorder(case)
    for given in case.inputs:
        if isinstance(given, list):
            arguments: Any = [(x.clone(), y.clone()) for x, y in given]
            returned = function(model, optimizer, case.loss_fn, arguments)
        else:
            x, y = given
            returned = function(model, optimizer, case.loss_fn, x.clone(), y.clone())
        buffer = optimizer.state.get(model.weight, {}).get("momentum_buffer")
        records.append(
            {
                **parameters_of(model),
                "momentum": values_of(buffer),
                "loss": number_of(returned),
                "loss_type": type_name(returned),
                "calls": recorder.take(),
            }
        )


def records_per_case(spec: CaseSpec) -> int:
    return spec.steps


TRACE = TraceShape(
    record_fields={
        **PARAMETERS,
        "momentum": "matrix?",
        "loss": "number",
        "loss_type": "text",
        "calls": "calls",
    },
    final_fields=None,
    most_records=records_per_case,
)

CHECKS = {
    "runs": "Every case ran to the end.",
    "weights-change": "Every call changed the weights.",
    "weights-match": "After every call the weights equal the reference loop's.",
    "fresh-gradients": "After every call `.grad` holds this call's gradient alone, not a sum.",
    "update-uses-current-batch": "Every update is one step on this call's gradient.",
    "loss-returned": "Every call returned its loss before the update, as a float.",
}


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    data = case_data(spec)
    weight, bias = data.weight, data.bias
    held_grad: Any = None if data.weight_grad is None else data.weight_grad.tolist()
    matched_reference = True
    for index, (record, expected) in enumerate(
        zip(learner.records, reference.records, strict=True)
    ):
        at = f"In {findings.where()}, call {index + 1}"
        x, y = batch_of(data.inputs[index])
        loss, weight_grad, bias_grad = loss_and_gradients(weight, bias, x, y)
        new_weight, new_bias = as_tensor(record["weight"]), as_tensor(record["bias"])

        if torch.equal(new_weight, weight) and torch.equal(new_bias, bias):
            findings.fail("weights-change", f"{at}: the weights did not change at all.")

        update_ok = True
        if not (
            close(new_weight, as_tensor(expected["weight"]))
            and close(new_bias, as_tensor(expected["bias"]))
        ):
            detail = ": " + difference("weight", new_weight, as_tensor(expected["weight"]))
            findings.fail(
                "weights-match", f"{at}: your weights differ from the reference loop's{detail}."
            )
            update_ok = _judge_update(
                findings,
                at,
                spec,
                index,
                (weight, bias),
                (new_weight, new_bias),
                (weight_grad, bias_grad),
                held_grad,
                reference,
                matched_reference,
            )
            matched_reference = False

        holds_this_batch = close_values(record["weight_grad"], weight_grad) and close_values(
            record["bias_grad"], bias_grad
        )
        # None or zeros after the call is fine when the step itself was right: the loop cleared
        # after stepping, as well as before.
        cleared_after_good_step = (
            cleared(record["weight_grad"]) and cleared(record["bias_grad"]) and update_ok
        )
        if not (holds_this_batch or cleared_after_good_step):
            findings.fail(
                "fresh-gradients",
                f"{at}: after the call, `.grad` does not hold this call's gradient. "
                + _describe_gradient(record, weight_grad, held_grad),
            )

        _judge_loss(findings, at, record, loss)
        if spec.micro_batches:
            _judge_accumulation(findings, at, spec, record)
        weight, bias = new_weight, new_bias
        held_grad = record["weight_grad"]
    return findings


def _judge_update(
    findings: CaseFindings,
    at: str,
    spec: CaseSpec,
    index: int,
    before: tuple[torch.Tensor, torch.Tensor],
    after: tuple[torch.Tensor, torch.Tensor],
    gradients: tuple[torch.Tensor, torch.Tensor],
    held_grad: Any,
    reference: CaseTrace,
    matched_reference: bool,
) -> bool:
    """Judge one step's update on its own, from the learner's weights before it.

    Plain SGD needs nothing but those weights. With momentum the update also depends on the
    optimizer's buffer, which is known (the reference's) only while the learner's weights
    matched the reference's; after they part, weights-match has failed and this step is not
    judged here. Returns whether the update was right (or not judged).
    """
    (weight, bias), (new_weight, new_bias), (weight_grad, bias_grad) = before, after, gradients
    if spec.momentum:
        if not matched_reference:
            return True
        previous = reference.records[index - 1]["momentum"] if index else None
        buffer = (
            weight_grad if previous is None else spec.momentum * as_tensor(previous) + weight_grad
        )
        # The bias's buffer is not recorded; the weight's is enough to tell a stale update.
        if close(new_weight, weight - spec.lr * buffer):
            return True
        expected_weight = weight - spec.lr * buffer
    else:
        expected_weight = weight - spec.lr * weight_grad
        if close(new_weight, expected_weight) and close(new_bias, bias - spec.lr * bias_grad):
            return True
    findings.fail(
        "update-uses-current-batch",
        f"{at}: the update is not one step on this call's gradient. "
        + _describe_update(weight, new_weight, expected_weight, spec, held_grad),
    )
    return False


def _describe_update(
    weight: torch.Tensor,
    new_weight: torch.Tensor,
    expected_weight: torch.Tensor,
    spec: CaseSpec,
    held_grad: Any,
) -> str:
    """Say what the learner's update looks like, when it is a known kind of wrong."""
    moved = new_weight - weight
    if not bool(moved.any()):
        return "The weights did not move: the optimizer stepped with no gradient."
    if not spec.momentum and held_grad is not None:
        stale = -spec.lr * as_tensor(held_grad)
        if close(moved, stale):
            return (
                "It is a step on the gradient `.grad` held before this call's backward(): "
                "a stale update, made with the previous batch's gradient."
            )
        fresh = expected_weight - weight
        if close(moved, stale + fresh):
            return (
                "It is a step on this call's gradient plus the one `.grad` already held: "
                "the gradients accumulated."
            )
    return "A right step gives " + difference("weight", new_weight, expected_weight) + "."


def _describe_gradient(record: dict[str, Any], fresh: torch.Tensor, held_grad: Any) -> str:
    recorded = record["weight_grad"]
    if recorded is None:
        return "It is `None`: no gradient was computed for this call."
    if held_grad is not None and close(as_tensor(recorded), as_tensor(held_grad) + fresh):
        return (
            "It is this call's gradient plus what `.grad` held before the call: the gradients "
            "accumulated, because nothing cleared them before backward()."
        )
    return difference("weight.grad", as_tensor(recorded), fresh) + "."


def _judge_loss(findings: CaseFindings, at: str, record: dict[str, Any], loss: float) -> None:
    returned = record["loss"]
    if record["loss_type"] != "float":
        findings.fail(
            "loss-returned",
            f"{at}: your function returned a {learner_text(record['loss_type'])}, not a "
            "`float`. Return `loss.item()`.",
        )
    elif returned is None or not within_tolerance(returned, loss):
        findings.fail(
            "loss-returned",
            f"{at}: the returned value is not this call's loss before the update. "
            f"You returned {returned:.6g}; the loss was {loss:.6g}.",
        )


def _judge_accumulation(
    findings: CaseFindings, at: str, spec: CaseSpec, record: dict[str, Any]
) -> None:
    """From the recorded calls: a backward() per micro-batch, nothing cleared between, one step.

    The numbers alone cannot tell accumulation from one backward() on the concatenated batch:
    an update not made from gradients accumulated this way fails update-uses-current-batch.
    """
    calls: list[str] = record["calls"]
    backwards = [i for i, call in enumerate(calls) if call == "backward"]
    steps = [i for i, call in enumerate(calls) if call == "step"]
    cleared_between = bool(backwards) and "zero_grad" in calls[backwards[0] : backwards[-1]]
    if (
        len(backwards) == spec.micro_batches
        and len(steps) == 1
        and steps[0] > backwards[-1]
        and not cleared_between
    ):
        return
    between = ", clearing the gradients between them," if cleared_between else ""
    findings.fail(
        "update-uses-current-batch",
        f"{at}: your function ran backward() {times(len(backwards))}{between} and stepped "
        f"{times(len(steps))}. Accumulating is one backward() per micro-batch "
        f"({spec.micro_batches} here), nothing cleared between them, then one step().",
    )


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    """The loss and the first weight after every call, the learner's against the reference."""
    return [
        plot_series(
            spec.id,
            "loss",
            [r["loss"] for r in learner.records],
            [r["loss"] for r in reference.records],
        ),
        plot_series(
            spec.id,
            "weight[0][0]",
            [r["weight"][0][0] for r in learner.records],
            [r["weight"][0][0] for r in reference.records],
        ),
    ]


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("loss_type", ("float",)),
    judge_case=judge_case,
    plots=plots,
)

KIND = ExerciseKind(
    name="step-function",
    summary="A function called once per batch (or per list of micro-batches) that trains one step.",
    record=record_steps,
    trace=TRACE,
    judge=JUDGE,
    models=stepping_models,
    replay=PER_CALL,
)
