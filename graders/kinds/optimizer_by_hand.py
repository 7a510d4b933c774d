"""The `optimizer-by-hand` kind: an optimizer's update written without `torch.optim`,
`sgd_step(params, velocities, lr, momentum, weight_decay)`, called once per batch.

A case is an `nn.Linear` and its batches (`harness.build_case`). Before each call the harness
clears `.grad`, runs the batch's forward and `backward()`, and on every second call releases the
bias's gradient (`None`, a parameter that got none this time). It hands the function the weight
and the bias, their velocity tensors (zeros at first, the same tensors every call), and the
case's `lr`, `momentum` and `weight_decay`. It records after each call the weight and the bias,
their velocity tensors and their `.grad`.

The grader computes each call's right result itself, from the state the call before left: the
batch's gradients at those weights, stepped by `torch.optim.SGD(lr, momentum, weight_decay)`
(no dampening, no Nesterov) with its momentum buffers loaded with those velocities. Every check
is decided from those values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import Case, Record, build_case, parameters_of, values_of
from graders.judging import (
    AFTER_THE_CALL,
    AT_CALL,
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    case_data,
    close_values,
    differs,
    loss_and_gradients,
)
from graders.kind import ExerciseKind
from graders.optimizers import declared_optimizer
from graders.report import PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import PARAMETERS, CaseTrace, TraceShape


def gradients_for_call(case: Case, call: int) -> None:
    """This call's gradients in `.grad`: the batch's backward pass, the bias's released on every
    second call (run in the sandbox too: harness names only)."""
    model = case.model
    model.weight.grad = None
    model.bias.grad = None
    x, y = case.inputs[call]
    case.loss_fn(model(x), y).backward()
    if call % 2 == 1:
        model.bias.grad = None


def record_hand_steps(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> None:
    """Call the function once per batch on the weight, the bias and their velocities (run in the
    sandbox too: harness names and gradients_for_call only)."""
    case = build_case(spec)
    model = case.model
    assert isinstance(model, nn.Linear)  # the kind reads no `model` setting
    velocities = [torch.zeros_like(model.weight), torch.zeros_like(model.bias)]
    lr = float(spec["lr"])
    momentum = float(spec.get("momentum") or 0.0)
    weight_decay = float(spec.get("weight_decay") or 0.0)
    for call in range(int(spec["steps"])):
        gradients_for_call(case, call)
        function([model.weight, model.bias], list(velocities), lr, momentum, weight_decay)
        records.append(
            {
                **parameters_of(model),
                "weight_velocity": values_of(velocities[0]),
                "bias_velocity": values_of(velocities[1]),
            }
        )


TRACE = TraceShape(
    record_fields={**PARAMETERS, "weight_velocity": "matrix", "bias_velocity": "vector"},
    final_fields=None,
    most_records=lambda spec: spec.steps,
)


def one_step(
    spec: CaseSpec, call: int, before: Record | None
) -> tuple[Record, torch.Tensor, torch.Tensor | None]:
    """What call `call` should leave, from the state the one before it left (the learner's own
    record; the case's first weights and zero velocities before call 1): the weights and
    velocities one step of `torch.optim.SGD` gives, its momentum buffers loaded with the
    velocities, and the gradients the harness hands the call (the bias's None every second
    call), computed here."""
    data = case_data(spec)
    if before is None:
        weight, bias = data.weight.clone(), data.bias.clone()
        velocities = [torch.zeros_like(weight), torch.zeros_like(bias)]
    else:
        weight, bias = as_tensor(before["weight"]), as_tensor(before["bias"])
        velocities = [as_tensor(before["weight_velocity"]), as_tensor(before["bias_velocity"])]
    x, y = data.inputs[call]
    gradients = loss_and_gradients(spec, {"weight": weight, "bias": bias}, x, y)[1]
    weight.grad = gradients["weight"]
    bias.grad = None if call % 2 == 1 else gradients["bias"]
    optimizer = declared_optimizer(spec, [weight, bias])
    for parameter, velocity in zip((weight, bias), velocities, strict=True):
        optimizer.state[parameter]["momentum_buffer"] = velocity
    optimizer.step()
    after = {
        "weight": weight.detach(),
        "bias": bias.detach(),
        "weight_velocity": velocities[0],
        "bias_velocity": velocities[1],
    }
    return after, weight.grad, bias.grad


CHECKS = {
    "runs": RAN_TO_THE_END,
    "weights-match": Sentence(
        "optimizer-by-hand/passed-weights-match",
        "After every call the weight and the bias are those of SGD with momentum and weight decay.",
    ),
    "velocities-match": Sentence(
        "optimizer-by-hand/passed-velocities-match",
        "After every call the velocity tensors hold SGD's momentum buffers: updated in place.",
    ),
    "grads-unchanged": Sentence(
        "optimizer-by-hand/passed-grads-unchanged",
        "Leaves every `.grad` as it found it.",
    ),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first.
AT_CALL_BIAS_NONE = Sentence(
    "optimizer-by-hand/at-call-bias-none",
    "In {case}, call {call} (the bias's `.grad` was `None`)",
)
GRAD_WRITTEN = Sentence(
    "optimizer-by-hand/grad-written",
    "{at}: after the call, `.grad` is not the gradient the call was given. Read `.grad`; do not "
    "write to it.",
)


# The recorded tensors in the learner's words: their arguments.
SAID = {
    "weight": "params[0]",
    "bias": "params[1]",
    "weight_velocity": "velocities[0]",
    "bias_velocity": "velocities[1]",
}


def _mismatch(record: Record, want: dict[str, torch.Tensor], names: tuple[str, ...]) -> Said | None:
    for name in names:
        if not close_values(record[name], want[name]):
            return differs(SAID[name], as_tensor(record[name]), want[name])
    return None


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    """Each call judged from the state the learner's previous call left, as the step kinds judge
    one call's update: one mistake is told where it is made, not in everything after it."""
    findings = CaseFindings(spec)
    for call, record in enumerate(learner.records):
        at = (AT_CALL_BIAS_NONE if call % 2 == 1 else AT_CALL)(case=findings.case(), call=call + 1)
        want, weight_grad, bias_grad = one_step(
            spec, call, learner.records[call - 1] if call else None
        )
        wrong = _mismatch(record, want, ("weight", "bias"))
        if wrong is not None:
            findings.fail("weights-match", AFTER_THE_CALL(at=at, wrong=wrong))
        wrong = _mismatch(record, want, ("weight_velocity", "bias_velocity"))
        if wrong is not None:
            findings.fail("velocities-match", AFTER_THE_CALL(at=at, wrong=wrong))
        kept = close_values(record["weight_grad"], weight_grad) and (
            record["bias_grad"] is None
            if bias_grad is None
            else close_values(record["bias_grad"], bias_grad)
        )
        if not kept:
            findings.fail("grads-unchanged", GRAD_WRITTEN(at=at))
    return findings


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


def hand_step_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """None of its own: the exercise's declared bugs name the mistakes."""
    return []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("value_type", ("NoneType",)),  # it returns nothing, and nothing is recorded
    judge_case=judge_case,
    plots=plots,
)

_FIX = """```python
with torch.no_grad():
    for p, v in zip(params, velocities):
        if p.grad is None:
            continue
        g = p.grad + weight_decay * p
        v.mul_(momentum).add_(g)
        p.sub_(lr * v)
```"""

# The diagnoses only this kind's exercises' known bugs give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="parameter-rebound",
        name="Parameter rebound, not updated",
        words=(
            "Your update makes a new tensor and binds it to the loop's name (`p = p - lr * v`): "
            "the model's parameter is never changed. Update it in place: `p.sub_(lr * v)` or "
            "`p -= lr * v`, under `torch.no_grad()`."
        ),
        hint=Hint(
            where="Look at the line that applies the update to `p`.",
            what=(
                "`p = p - ...` makes a new tensor and rebinds the local name; the parameter the "
                "model holds stays as it was."
            ),
            fix=_FIX,
            lesson="in-place",
        ),
    ),
    Declared(
        code="velocity-rebound",
        name="Velocity not kept",
        words=(
            "Your velocity is computed into a new tensor (`v = momentum * v + g`), so the "
            "velocity tensor you were given stays zero and every step starts without momentum. "
            "Update it in place: `v.mul_(momentum).add_(g)`."
        ),
        hint=Hint(
            where="Look at the line that computes the new velocity.",
            what=(
                "The velocity must carry over to the next call: only the tensors you were given "
                "do. A new tensor bound to `v` is lost when the function returns."
            ),
            fix=_FIX,
            lesson="in-place",
        ),
    ),
    Declared(
        code="weight-decay-after-momentum",
        name="Weight decay added after momentum",
        words=(
            "Your weight decay is added to the update after the momentum, not to the gradient "
            "before it: SGD's velocity accumulates `p.grad + weight_decay * p`."
        ),
        hint=Hint(
            where="Look at where `weight_decay * p` enters the update.",
            what=(
                "SGD adds the weight decay to the gradient first, and the velocity accumulates "
                "that sum; added after, it never enters the velocity."
            ),
            fix=_FIX,
            lesson="update",
        ),
    ),
    Declared(
        code="velocity-dampened",
        name="Velocity averaged, not summed",
        words=(
            "Your velocity is a running average (`momentum * v + (1 - momentum) * g`): SGD's "
            "momentum, without dampening, adds the whole gradient: `momentum * v + g`."
        ),
        hint=Hint(
            where="Look at what is added to `momentum * v`.",
            what=(
                "With no dampening, SGD adds the whole gradient to the decayed velocity, not the "
                "share of it that a running average would add."
            ),
            fix=_FIX,
            lesson="update",
        ),
    ),
    Declared(
        code="gradient-written",
        name="Gradient changed in place",
        words=(
            "Your function writes to `p.grad` (the weight decay added into it in place): the "
            "step is right, but `.grad` no longer holds the gradient that backward() computed. "
            "Compute `g = p.grad + weight_decay * p` as a new tensor."
        ),
        hint=Hint(
            where="Look for an in-place operation on `p.grad` (`add_`, `+=`).",
            what=(
                "The gradient is read, not written: other code (clipping, logging) reads "
                "`.grad` after the step. `g = p.grad; g += ...` writes into `.grad` too."
            ),
            fix=_FIX,
            lesson="update",
        ),
    ),
)

KIND = ExerciseKind(
    name="optimizer-by-hand",
    summary="SGD with momentum and weight decay written by hand: parameters and velocities "
    "updated in place, once per batch.",
    record=record_hand_steps,
    # It hands the function these three; the update it asks for is SGD's, whatever is declared.
    optimizer_settings=frozenset({"lr", "momentum", "weight_decay"}),
    trace=TRACE,
    judge=JUDGE,
    models=hand_step_models,
    sandbox_helpers=(gradients_for_call,),
    diagnoses=DIAGNOSES,
)
