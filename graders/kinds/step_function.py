"""The `step-function` kind: a function called once per batch that zeroes, backpropagates and steps.

One kind, one module (graders/kinds): its recorder, its judge and its models stay together.

Its cases give it one batch a call (`train_step(model, optimizer, loss_fn, x, y)`), or a list of
equal-size micro-batches a call (`micro_batches`), whose single update must equal one step on
their concatenation. The harness records the state after each call. What decides a check is
what the code did to the values (DESIGN.md, invariant 9): gradients accumulated one
`backward()` per micro-batch, or by `torch.autograd.grad` added into `.grad` by hand, and one
`backward()` on the concatenated batch leave the same values and score the same; the recorded
calls only say why an update differs.
Every step is judged twice: against the reference loop's weights (global), and on its own,
from the learner's weights before it (local), so the messages can say which step went wrong
first and how.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from graders.claims import ACCUMULATED, NO_BACKWARD, RELEASED_AFTER_BACKWARD, said_calls
from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec
from graders.fitting import stepping_models
from graders.harness import (
    CallRecorder,
    Record,
    build_case,
    first_parameter,
    number_of,
    optimizer_state,
    parameters_of,
    type_name,
)
from graders.judging import (
    AT_CALL,
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    batch_of,
    case_data,
    cleared,
    close,
    close_values,
    constant_factor,
    differs,
    first_difference,
    loss_and_gradients,
    plot_series,
    said_versus,
    then,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.optimizers import STATE_FIELDS, declared_optimizer, load_state
from graders.quoting import learner_text
from graders.replay import PER_CALL
from graders.report import PlotSeries
from graders.sentences import Said, Sentence
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
            extra = () if spec.get("max_norm") is None else (float(spec["max_norm"]),)
            returned = function(model, optimizer, case.loss_fn, x.clone(), y.clone(), *extra)
        records.append(
            {
                **parameters_of(model),
                **optimizer_state(optimizer, first_parameter(model)),
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
        **STATE_FIELDS,
        "loss": "number",
        "loss_type": "text",
        "calls": "calls",
    },
    final_fields=None,
    most_records=records_per_case,
)

CHECKS = {
    "runs": RAN_TO_THE_END,
    "weights-change": Sentence(
        "step-function/passed-weights-change",
        "Every call changed the weights.",
    ),
    "weights-match": Sentence(
        "step-function/passed-weights-match",
        "After every call the weights equal the reference loop's.",
    ),
    "fresh-gradients": Sentence(
        "step-function/passed-fresh-gradients",
        "After every call `.grad` holds this call's gradient alone, or was cleared after a right "
        "step.",
    ),
    "update-uses-current-batch": Sentence(
        "step-function/passed-update",
        "Every update is one step on this call's gradient.",
    ),
    "loss-returned": Sentence(
        "step-function/passed-loss-returned",
        "Every call returned its loss before the update, as a float.",
    ),
    "optimizer-state": Sentence(
        "step-function/passed-optimizer-state",
        "After every call the optimizer's state equals the reference loop's.",
    ),
}


# What the checks say (graders.sentences): where no diagnosis explains a failing check, what
# differs and by how much, the learner's value first; a cause only as a claim that held.
WEIGHTS_UNCHANGED = Sentence(
    "step-function/weights-unchanged",
    "{at}: the weights did not change at all.",
)
WEIGHTS_DIFFER = Sentence(
    "step-function/weights-differ",
    "{at}: your weights differ from the reference loop's: {difference}.",
)
GRAD_DIFFERS = Sentence(
    "step-function/grad-differs",
    "{at}: after the call, `.grad` is not the reference's. {how}",
)
GRAD_DIFFERS_CLIPPED = Sentence(
    "step-function/grad-differs-clipped",
    "{at}: after the call, `.grad` is not the reference's (this call's gradient, clipped to "
    "`max_norm`). {how}",
)
GRAD_NONE = Sentence("step-function/grad-none", "It is `None`.")
GRAD_UNCLIPPED = Sentence(
    "step-function/grad-unclipped",
    "It holds this call's gradient as `backward()` left it, not clipped.",
)
GRAD_PLUS_HELD = Sentence(
    "step-function/grad-plus-held",
    "It is this call's gradient plus what `.grad` held before the call.",
)
GRAD_FACTOR = Sentence("step-function/grad-factor", "It is {factor:.3g} times the reference's.")
GRAD_VERSUS = Sentence(
    "step-function/grad-versus",
    "After the call, `{where}` is {yours:.6g}; the reference's is {theirs:.6g}.",
)
UPDATE_DIFFERS = Sentence(
    "step-function/update-differs",
    "{at}: your update differs from the reference's step from your weights before the call. {how}",
)
NOT_MOVED = Sentence(
    "step-function/not-moved",
    "The weights did not move. The calls recorded in this call: {calls}.",
)
UPDATE_UNCLIPPED = Sentence(
    "step-function/update-unclipped",
    "It equals one step on this call's gradient as `backward()` left it, not clipped: the "
    "reference clips it to `max_norm` first.",
)
UPDATE_STALE = Sentence(
    "step-function/update-stale",
    "It equals a step on the gradient `.grad` held before this call, the previous call's.",
)
UPDATE_STALE_PLUS = Sentence(
    "step-function/update-stale-plus",
    "It equals a step on this call's gradient plus the one `.grad` held before the call.",
)
UPDATE_FACTOR = Sentence(
    "step-function/update-factor",
    "Your update is {factor:.3g} times the reference's.",
)
UPDATE_VERSUS = Sentence(
    "step-function/update-versus",
    "After the call, `{where}` is {yours:.6g}; the reference's step gives {theirs:.6g}.",
)
STEPS_COUNTED = Sentence(
    "step-function/steps-counted",
    "{at}: after it the optimizer counts {steps} steps in all, the reference loop's {theirs}: one "
    "step() per call, on this call's gradient.",
)
STATE_DIFFERS = Sentence(
    "step-function/state-differs",
    "{at}: the optimizer's {state} differs from the reference loop's: {detail}.",
)
STATE_MISSING = Sentence("step-function/state-missing", "it is missing")
STATE_EXTRA = Sentence("step-function/state-extra", "it should not be there")
LOSS_NOT_FLOAT = Sentence(
    "step-function/loss-not-float",
    "{at}: your function returned a {type}, not a `float`. Return `loss.item()`.",
)
LOSS_DIFFERS = Sentence(
    "step-function/loss-differs",
    "{at}: the returned value is not this call's loss before the update. You returned "
    "{returned:.6g}; the loss was {loss:.6g}.",
)


Tensors = dict[str, torch.Tensor]


def _parameters(record: dict[str, Any], names: Any) -> Tensors:
    return {name: as_tensor(record[name]) for name in names}


def _all_close(mine: Tensors, theirs: Tensors) -> bool:
    return all(close(mine[name], theirs[name]) for name in theirs)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    """Each call's parameters, gradients, optimizer state and loss, over the model's parameters
    by name (`CaseData`): the words name the first parameter that differs, or the first layer's
    weight, whose gradient and optimizer state speak for the model's."""
    findings = CaseFindings(spec)
    data = case_data(spec)
    first = data.first
    parameters = dict(data.parameters)
    start_grad = data.grads[first]
    held_grad: Any = None if start_grad is None else start_grad.tolist()
    matched_reference = True
    for index, (record, expected) in enumerate(
        zip(learner.records, reference.records, strict=True)
    ):
        at = AT_CALL(case=findings.case(), call=index + 1)
        x, y = batch_of(data.inputs[index])
        loss, gradients = loss_and_gradients(spec, parameters, x, y)
        unclipped = gradients[first]
        if spec.max_norm is not None:
            gradients = clipped(spec.max_norm, gradients)
        new = _parameters(record, parameters)

        if all(torch.equal(new[name], parameters[name]) for name in parameters):
            findings.fail("weights-change", WEIGHTS_UNCHANGED(at=at))

        update_ok = True
        theirs = _parameters(expected, parameters)
        if not _all_close(new, theirs):
            findings.fail(
                "weights-match",
                WEIGHTS_DIFFER(at=at, difference=differs(*first_difference(new, theirs))),
            )
            update_ok = _judge_update(
                findings,
                at,
                spec,
                index,
                parameters,
                new,
                gradients,
                unclipped,
                record["calls"],
                held_grad,
                reference.records[index - 1] if index else None,
                matched_reference,
            )
            matched_reference = False
        _judge_state(findings, at, record, expected)

        holds_this_batch = all(
            close_values(record[f"{name}_grad"], gradient) for name, gradient in gradients.items()
        )
        # None or zeros after the call is fine when the step itself was right: the loop cleared
        # after stepping, as well as before.
        cleared_after_good_step = (
            all(cleared(record[f"{name}_grad"]) for name in gradients) and update_ok
        )
        if not (holds_this_batch or cleared_after_good_step):
            differing = GRAD_DIFFERS_CLIPPED if spec.max_norm else GRAD_DIFFERS
            how = _describe_gradient(spec, first, record, gradients[first], unclipped, held_grad)
            findings.fail("fresh-gradients", differing(at=at, how=how))

        _judge_loss(findings, at, record, loss)
        parameters = new
        held_grad = record[f"{first}_grad"]
    return findings


def _judge_update(
    findings: CaseFindings,
    at: Said,
    spec: CaseSpec,
    index: int,
    before: Tensors,
    after: Tensors,
    gradients: Tensors,
    unclipped: torch.Tensor,
    calls: list[str],
    held_grad: Any,
    previous: dict[str, Any] | None,
    matched_reference: bool,
) -> bool:
    """Judge one step's update on its own: a fresh optimizer of the declared type, loaded with
    the state it holds before the step (`previous`: the reference's record of the call before),
    stepped here on this call's gradient (clipped, when the case clips).

    A stateless optimizer (plain SGD) needs nothing but the learner's weights. A stateful one
    is judged only while the learner's weights matched the reference's, from the reference's
    state: the learner's own may be empty (an update written by hand never steps the
    optimizer), and a state that differs is the optimizer-state check's. Its state is recorded
    for the first parameter only (the first layer's weight), so only that one is judged.
    Returns whether the update was right (or not judged).
    """
    first = next(iter(before))
    if spec.stateful and not matched_reference:
        return True
    expected = one_step(spec, before, gradients, previous)
    if close(after[first], expected[first]) and (spec.stateful or _all_close(after, expected)):
        return True
    unclipped_weight = None
    if spec.max_norm is not None:
        unclipped_weight = one_step(spec, before, {**gradients, first: unclipped}, previous)[first]
    findings.fail(
        "update-uses-current-batch",
        UPDATE_DIFFERS(
            at=at,
            how=_describe_update(
                first,
                before[first],
                after[first],
                expected[first],
                unclipped_weight,
                spec,
                calls,
                held_grad,
            ),
        ),
    )
    return False


def one_step(
    spec: CaseSpec, before: Tensors, gradients: Tensors, state: dict[str, Any] | None
) -> Tensors:
    """The parameters after one step of the declared optimizer, from `state` (a record's
    optimizer fields, of the first parameter; None before the first step), on the given
    gradients."""
    parameters = {name: tensor.clone() for name, tensor in before.items()}
    optimizer = declared_optimizer(spec, list(parameters.values()))
    if state is not None:
        load_state(optimizer, next(iter(parameters.values())), state)
    for name, parameter in parameters.items():
        parameter.grad = gradients[name].clone()
    optimizer.step()
    return parameters


def clipped(max_norm: float, gradients: Tensors) -> Tensors:
    """The gradients as `clip_grad_norm_` leaves them: scaled together to at most `max_norm`."""
    holders = {name: torch.zeros_like(gradient) for name, gradient in gradients.items()}
    for name, holder in holders.items():
        holder.grad = gradients[name].clone()
    torch.nn.utils.clip_grad_norm_(list(holders.values()), max_norm)
    return {name: holder.grad for name, holder in holders.items() if holder.grad is not None}


# The optimizer's state fields, in the learner's words, each after "the optimizer's".
_STATE_NAMES = {
    "momentum": Sentence("step-function/state-momentum", "momentum buffer"),
    "exp_avg": Sentence(
        "step-function/state-exp-avg",
        "`exp_avg` (the running mean of the gradients)",
    ),
    "exp_avg_sq": Sentence(
        "step-function/state-exp-avg-sq",
        "`exp_avg_sq` (the running mean of their squares)",
    ),
    "max_exp_avg_sq": Sentence("step-function/state-max-exp-avg-sq", "`max_exp_avg_sq`"),
}


def _judge_state(
    findings: CaseFindings, at: Said, record: dict[str, Any], expected: dict[str, Any]
) -> None:
    """The optimizer's state after the call against the reference loop's: a second step, or a
    step on a zeroed or summed gradient, shows in it even where the weights hide it."""
    if record["opt_step"] != expected["opt_step"]:
        steps, expected_steps = int(record["opt_step"] or 0), int(expected["opt_step"] or 0)
        findings.fail("optimizer-state", STEPS_COUNTED(at=at, steps=steps, theirs=expected_steps))
        return
    for name, words in _STATE_NAMES.items():
        mine, theirs = record[name], expected[name]
        if (mine is None) != (theirs is None) or not (
            mine is None or close(as_tensor(mine), as_tensor(theirs))
        ):
            detail = (
                STATE_MISSING()
                if mine is None
                else STATE_EXTRA()
                if theirs is None
                else differs(name, as_tensor(mine), as_tensor(theirs))
            )
            findings.fail("optimizer-state", STATE_DIFFERS(at=at, state=words(), detail=detail))
            return


def _describe_update(
    name: str,
    weight: torch.Tensor,
    new_weight: torch.Tensor,
    expected_weight: torch.Tensor,
    unclipped_weight: torch.Tensor | None,
    spec: CaseSpec,
    calls: list[str],
    held_grad: Any,
) -> Said:
    """What the learner's update is, in numbers; a cause only where the recorded calls bear it
    out (`graders.claims`)."""
    moved, expected = new_weight - weight, expected_weight - weight
    if not bool(moved.any()):
        return NOT_MOVED(calls=said_calls(calls))
    if unclipped_weight is not None and close(new_weight, unclipped_weight):
        return UPDATE_UNCLIPPED()
    if not spec.stateful and held_grad is not None:
        stale = -spec.lr * as_tensor(held_grad)
        if close(moved, stale):
            return UPDATE_STALE()
        if close(moved, stale + expected):
            return then(UPDATE_STALE_PLUS(), ACCUMULATED.said_in_check(calls))
    factor = constant_factor(moved, expected)
    if factor is not None:
        return UPDATE_FACTOR(factor=factor)
    return said_versus(UPDATE_VERSUS, name, new_weight, expected_weight)


def _describe_gradient(
    spec: CaseSpec,
    name: str,
    record: dict[str, Any],
    fresh: torch.Tensor,
    unclipped: torch.Tensor,
    held_grad: Any,
) -> Said:
    """What `.grad` holds after the call, in numbers; a cause only where the calls bear it out."""
    recorded, calls = record[f"{name}_grad"], record["calls"]
    if recorded is None:
        why = RELEASED_AFTER_BACKWARD.said_in_check(calls) or NO_BACKWARD.said_in_check(calls)
        return then(GRAD_NONE(), why)
    mine = as_tensor(recorded)
    if spec.max_norm is not None and close(mine, unclipped):
        return GRAD_UNCLIPPED()
    if held_grad is not None and close(mine, as_tensor(held_grad) + fresh):
        return then(GRAD_PLUS_HELD(), ACCUMULATED.said_in_check(calls))
    factor = constant_factor(mine, fresh)
    if factor is not None:
        return GRAD_FACTOR(factor=factor)
    return said_versus(GRAD_VERSUS, f"{name}.grad", mine, fresh)


def _judge_loss(findings: CaseFindings, at: Said, record: dict[str, Any], loss: float) -> None:
    returned = record["loss"]
    if record["loss_type"] != "float":
        findings.fail(
            "loss-returned", LOSS_NOT_FLOAT(at=at, type=learner_text(record["loss_type"]))
        )
    elif returned is None or not within_tolerance(returned, loss):
        findings.fail("loss-returned", LOSS_DIFFERS(at=at, returned=returned, loss=loss))


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    """The loss and the first weight after every call, the learner's against the reference."""
    first = case_data(spec).first
    return [
        plot_series(
            spec.id,
            "loss",
            [r["loss"] for r in learner.records],
            [r["loss"] for r in reference.records],
        ),
        plot_series(
            spec.id,
            f"{first}[0][0]",
            [r[first][0][0] for r in learner.records],
            [r[first][0][0] for r in reference.records],
        ),
    ]


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("loss_type", ("float",)),
    judge_case=judge_case,
    plots=plots,
)


# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="missing-clip",
        hint=Hint(
            where=(
                "Look at `clip_grad_norm_`: where it sits among `backward()` and `step()`, and "
                "which parameters it is given."
            ),
            what=(
                "The step used gradients that were not clipped: nothing clipped them, the "
                "clipping ran before `backward()` when `.grad` held nothing of this batch, or "
                "it was given no parameters (a generator already used up is empty)."
            ),
            fix="""Clip between the backward pass and the step:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
optimizer.step()
return loss.item()
```""",
        ),
        name="Gradients not clipped before the step",
        words=(
            "Your steps used gradients that were not clipped to `max_norm`: each update equals "
            "a step on the gradient as `backward()` left it. `clip_grad_norm_` clips what "
            "`.grad` holds when it runs, of the parameters it is given: call it after "
            "`loss.backward()`, before `optimizer.step()`, on `model.parameters()` (a generator "
            "already used up, by an earlier loop say, is empty and clips nothing)."
        ),
        about="clipping",
    ),
    Declared(
        code="clip-after-step",
        hint=Hint(
            where="Look at the order of `clip_grad_norm_` and `optimizer.step()`.",
            what=(
                "The clipping runs after `step()`: the step has already used the unclipped "
                "gradients, and the clipped ones are cleared before anything uses them."
            ),
            fix="""Move the clipping before the step:

```python
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
optimizer.step()
```""",
        ),
        name="Clipped after the step",
        words=(
            "Your code clips the gradients after `optimizer.step()`: the step had already used "
            "them unclipped, and the clipped ones are never used. Clip after `loss.backward()` "
            "and before `optimizer.step()`."
        ),
        about="clipping",
    ),
    Declared(
        code="clip-by-value",
        hint=Hint(
            where="Look at which clipping function you call.",
            what=(
                "`clip_grad_value_` cuts each gradient entry on its own, which changes the "
                "gradient's direction; the exercise asks for the gradients scaled together so "
                "that their joint norm is at most `max_norm`."
            ),
            fix="""Clip by the norm of all the gradients together:

```python
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
```""",
        ),
        name="Clipped by value, not by norm",
        words=(
            "Your code clips each gradient value on its own (`clip_grad_value_`), so the "
            "gradient changes direction and its norm is not `max_norm`. Clip by the norm of all "
            "the gradients together: `torch.nn.utils.clip_grad_norm_(model.parameters(), "
            "max_norm)`."
        ),
        about="clipping",
    ),
    Declared(
        code="clip-norm-constant",
        name="Clipped to a norm of its own",
        words=(
            "Your code clips the gradients by their norm, but to a `max_norm` written into the "
            "code rather than the one your function is given: each case gives its own. Pass the "
            "argument on: `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`."
        ),
        about="clipping",
        hint=Hint(
            where="Look at the second argument of `clip_grad_norm_`.",
            what=(
                "The clipping uses a number of your own, not the `max_norm` your function "
                "receives: the cases give different ones."
            ),
            fix="""Clip to the `max_norm` you were given:

```python
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
```""",
        ),
    ),
)

KIND = ExerciseKind(
    name="step-function",
    summary="A function called once per batch (or per list of micro-batches) that trains one step.",
    record=record_steps,
    case_settings=frozenset({"max_norm", "micro_batches", "model", "loss"}),
    trace=TRACE,
    judge=JUDGE,
    models=stepping_models,
    replay=PER_CALL,
    diagnoses=DIAGNOSES,
)
