"""The `mixed-precision-step` kind: one training step under autocast with a gradient scaler and
clipping, `train_step(model, optimizer, scaler, loss_fn, x, y, max_norm) -> float`, called once
per batch on one scaler.

A case is an `nn.Linear`, the case's optimizer, `nn.MSELoss()` and its batches
(`harness.build_case`), and a `torch.amp.GradScaler("cpu")` that starts at the case's
`loss_scale` (1024 unless set; at 2**127 a call's scaled gradients overflow and the scaler skips
that step) and grows after every step without an overflow (`growth_interval=1`).
`optimizer.step()` past an overflow, beside or instead of `scaler.step`, steps on infinite
gradients (a training that blows up); an `update()` too many shows in the scale (a missing one
makes torch refuse the next call's `unscale_`); a clip before `unscale_` clips gradients
multiplied by the scale. `max_norm` is the case's, shorter than every batch's gradient.

What the harness records after each call: the weight and the bias, the scaler's scale, the
returned value and its type. The grader runs the same steps itself (`expected`), with
`torch.autocast(device_type="cpu", dtype=torch.bfloat16)`, and compares.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import Record, build_case, number_of, parameters_of, type_name
from graders.judging import (
    AFTER_THE_CALL,
    AT_CALL,
    IN_CASE,
    NOT_FLOAT,
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    close_values,
    differs,
)
from graders.kind import ExerciseKind
from graders.quoting import learner_text
from graders.report import Diagnosis, PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import CaseTrace, TraceShape


def make_scaler(spec: dict[str, Any]) -> torch.amp.GradScaler:
    """The case's scaler: its `loss_scale` at first (1024, CaseSpec's default, when the case
    sets none), doubled by every `update()` after a step without an overflow, halved after one
    (run in the sandbox too: harness names only)."""
    scale = float(spec.get("loss_scale", 1024.0))
    return torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=1)


def record_amp_steps(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> None:
    """Call the function once per batch on one scaler (run in the sandbox too: harness names
    and make_scaler only)."""
    case = build_case(spec)
    scaler = make_scaler(spec)
    for x, y in case.inputs:
        returned = function(
            case.model,
            case.optimizer,
            scaler,
            case.loss_fn,
            x.clone(),
            y.clone(),
            float(spec["max_norm"]),
        )
        weights = parameters_of(case.model)
        loss = number_of(returned)
        records.append(
            {
                "weight": weights["weight"],
                "bias": weights["bias"],
                # A scale near float32's largest is past the trace's bound: its power of two.
                "scale_log2": math.log2(scaler.get_scale()),
                # A loss times such a scale is an infinity: no finite number, said as such.
                "loss": loss if loss is not None and abs(loss) <= 1e15 else None,
                "loss_type": type_name(returned),
            }
        )


TRACE = TraceShape(
    record_fields={
        "weight": "matrix",
        "bias": "vector",
        "scale_log2": "number",
        "loss": "number",
        "loss_type": "text",
    },
    final_fields=None,
    most_records=lambda spec: spec.steps,
)


@functools.cache
def expected(spec: CaseSpec, clipped: bool = True, autocast: bool = True) -> tuple[Record, ...]:
    """After each call: the weights, the scale and the loss of the textbook step, and the norm
    of the unscaled gradients, computed here; with `clipped` False, the step without
    clipping; with `autocast` False, the forward pass and the loss in float32."""
    case = build_case(spec.harness_spec())
    model, optimizer = case.model, case.optimizer
    scaler = make_scaler(spec.harness_spec())
    assert spec.max_norm is not None  # the kind's cases declare it (configuration_problem)
    found = []
    for x, y in case.inputs:
        optimizer.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = case.loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if clipped:
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_norm)
        scaler.step(optimizer)
        scaler.update()
        weights = parameters_of(model)
        found.append(
            {
                "weight": weights["weight"],
                "bias": weights["bias"],
                "scale_log2": math.log2(scaler.get_scale()),
                "loss": loss.item(),
                "norm": norm.item(),
            }
        )
    return tuple(found)


CHECKS = {
    "runs": RAN_TO_THE_END,
    "weights-match": Sentence(
        "mixed-precision-step/passed-weights-match",
        "After every call the weights are those of the step: unscaled, clipped, then stepped by "
        "the scaler.",
    ),
    "scaler-updated": Sentence(
        "mixed-precision-step/passed-scaler-updated",
        "After every call the scaler's scale is the one `scaler.update()` sets.",
    ),
    "loss-returned": Sentence(
        "mixed-precision-step/passed-loss-returned",
        "Returns the loss computed under autocast, unscaled.",
    ),
    "returns-float": Sentence(
        "mixed-precision-step/passed-returns-float", "Returns a Python float."
    ),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first.
SCALE_DIFFERS = Sentence(
    "mixed-precision-step/scale-differs",
    "{at}: after the call, the scaler's scale is 2**{yours:g} where 2**{theirs:g} was expected.",
)
NO_SCALE = Sentence(
    "mixed-precision-step/no-scale",
    "{at}: after the call, the scaler's scale is not a number where 2**{theirs:g} was expected.",
)
LOSS_DIFFERS = Sentence(
    "mixed-precision-step/loss-differs",
    "{at}: you returned {yours:.6g}; the reference step's loss under autocast, at this call, is "
    "{theirs:.6g}.",
)
NO_FINITE_LOSS = Sentence(
    "mixed-precision-step/no-finite-loss",
    "{at}: you returned no finite number; the reference step's loss under autocast, at this "
    "call, is {theirs:.6g}.",
)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    for call, (record, want) in enumerate(zip(learner.records, expected(spec), strict=False)):
        at = AT_CALL(case=findings.case(), call=call + 1)
        for name in ("weight", "bias"):
            theirs = as_tensor(want[name])
            if not close_values(record[name], theirs):
                wrong = differs(name, as_tensor(record[name]), theirs)
                findings.fail("weights-match", AFTER_THE_CALL(at=at, wrong=wrong))
                break
        scale = record["scale_log2"]
        if scale is None:
            findings.fail("scaler-updated", NO_SCALE(at=at, theirs=want["scale_log2"]))
        elif scale != want["scale_log2"]:
            findings.fail(
                "scaler-updated", SCALE_DIFFERS(at=at, yours=scale, theirs=want["scale_log2"])
            )
        loss = record["loss"]
        if loss is None:
            findings.fail("loss-returned", NO_FINITE_LOSS(at=at, theirs=want["loss"]))
        elif not close_values([loss], as_tensor([want["loss"]])):
            findings.fail("loss-returned", LOSS_DIFFERS(at=at, yours=loss, theirs=want["loss"]))
        if record["loss_type"] != "float":
            findings.fail("returns-float", NOT_FLOAT(at=at, type=learner_text(record["loss_type"])))
    return findings


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


def _steps_as(learner: CaseTrace, steps: tuple[Record, ...]) -> bool:
    """Are the learner's weights, scales and losses after every call those of `steps`?"""
    return len(learner.records) == len(steps) and all(
        close_values(record["weight"], as_tensor(want["weight"]))
        and close_values(record["bias"], as_tensor(want["bias"]))
        and record["scale_log2"] == want["scale_log2"]
        and record["loss"] is not None
        and close_values([record["loss"]], as_tensor([want["loss"]]))
        for record, want in zip(learner.records, steps, strict=True)
    )


UNCLIPPED_NORM = Sentence(
    "mixed-precision-step/unclipped-norm",
    "In {case}, call {call}: the unscaled gradients' norm was {norm:.4g}, above `max_norm` "
    "({max_norm:g}), and your weights are those of a step on them unclipped.",
)
FLOAT32_LOSS = Sentence(
    "mixed-precision-step/float32-loss",
    "In {case}, call 1: you returned {yours:.6g}, the loss computed in float32; under autocast "
    "(bfloat16) it is {theirs:.6g}.",
)


def amp_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """Steps on unclipped gradients (the clip left out, or made after `scaler.step`, where it
    changes nothing the step used), and a forward pass in float32: each the case's steps
    computed here that way, the learner's weights, scales and losses all theirs. The known
    bugs name the other mistakes."""
    if all(_steps_as(traces[spec.id], expected(spec)) for spec in exercise.cases):
        return []
    found = []
    if all(_steps_as(traces[spec.id], expected(spec, clipped=False)) for spec in exercise.cases):
        spec = exercise.cases[0]
        call, want = next(
            ((n, w) for n, w in enumerate(expected(spec), start=1) if w["norm"] > spec.max_norm),
            (1, expected(spec)[0]),
        )
        note = UNCLIPPED_NORM(
            case=IN_CASE(case=spec.id), call=call, norm=want["norm"], max_norm=spec.max_norm
        )
        found.append(Explanation(("unclipped-step",), "amp-unclipped", note))
    if all(_steps_as(traces[spec.id], expected(spec, autocast=False)) for spec in exercise.cases):
        spec = exercise.cases[0]
        note = FLOAT32_LOSS(
            case=IN_CASE(case=spec.id),
            yours=traces[spec.id].records[0]["loss"],
            theirs=expected(spec)[0]["loss"],
        )
        found.append(Explanation(("missing-autocast",), "amp-float32", note))
    return found


NOT_UPDATED = Sentence(
    "mixed-precision-step/not-updated",
    "After call {call} of case `{case}` the scaler's scale was still 2**{scale:g}, as before the "
    "call: `scaler.update()` did not run (after every step it changes the scale: twice as large "
    "after finite gradients, half after an overflow).",
)


def failure_named(spec: CaseSpec, learner: CaseTrace) -> tuple[Diagnosis, Said] | None:
    """A run that raised at a call after one that left the scaler's scale as it was: that call
    made no `update()` (each one after a step changes the scale: `growth_interval` is 1), and
    torch refuses another `unscale_` or `step` until one runs (its "unscale_() is being called
    after step()")."""
    error, records = learner.error, learner.records
    if error is None or not records or error.type != "RuntimeError":
        return None
    # The words say torch refused: its messages (the error's text teaches, never scores).
    if "update()" not in error.message and "after step()" not in error.message:
        return None
    call = len(records)
    before = records[-2]["scale_log2"] if call > 1 else math.log2(spec.loss_scale)
    after = records[-1]["scale_log2"]
    if after is None or after != before or call >= spec.steps:
        return None
    return "scaler-not-updated", NOT_UPDATED(call=call, case=spec.id, scale=after)


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("loss_type", ("float",)),
    judge_case=judge_case,
    plots=plots,
)

_FIX = """After the forward pass and the loss under autocast:

```python
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
scaler.step(optimizer)
scaler.update()
return loss.item()
```"""

# The diagnoses only this kind's exercises' known bugs give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="clip-before-unscale",
        name="Clipped the scaled gradients",
        words=(
            "Your code clipped the gradients while they were still multiplied by the scaler's "
            "scale: their norm is the scale times too long, so clipping shrinks them far too "
            "much. Call `scaler.unscale_(optimizer)` before `clip_grad_norm_`."
        ),
        hint=Hint(
            where="Look at what the gradients hold when you clip them.",
            what=(
                "After `scaler.scale(loss).backward()` every gradient is multiplied by the "
                "scale; `max_norm` is a norm of the true gradients."
            ),
            fix=_FIX,
            lesson="order",
        ),
    ),
    Declared(
        code="unclipped-step",
        name="Stepped on unclipped gradients",
        words=(
            "Your weights are those of steps on the gradients as they were unscaled, not "
            "clipped to `max_norm`. `clip_grad_norm_` changes a step only when it runs between "
            "`scaler.unscale_(optimizer)` and `scaler.step(optimizer)`: left out, or called "
            "after the step, it clips nothing the step used."
        ),
        hint=Hint(
            where="Look at where `clip_grad_norm_` sits among `unscale_`, `step` and `update`.",
            what=(
                "The step uses what `.grad` holds when `scaler.step` runs: a clip after it "
                "comes too late for this step, and the next call clears the gradients."
            ),
            fix=_FIX,
            lesson="order",
        ),
    ),
    Declared(
        code="missing-autocast",
        name="Forward pass not under autocast",
        words=(
            "Your losses and weights are those of a forward pass and a loss computed in "
            'float32: the model did not run under `torch.autocast(device_type="cpu", '
            "dtype=torch.bfloat16)`. Run the forward pass and the loss inside that `with` "
            "block; the backward pass and the step come after it."
        ),
        hint=Hint(
            where="Look at the lines that compute the model's output and the loss.",
            what=(
                "Mixed precision happens only inside `torch.autocast`: outside it every "
                "operation runs in full precision, and the scaler scales a full-precision loss."
            ),
            fix="""On the CPU, autocast's default type is the one the step asks for:

```python
with torch.autocast(device_type="cpu"):
    loss = loss_fn(model(x), y)
scaler.scale(loss).backward()
```""",
            lesson="order",
        ),
    ),
    Declared(
        code="scaler-not-updated",
        name="Scaler never updated",
        words=(
            "Your step does not call `scaler.update()`: the scale stayed as it was, and the "
            "scaler's record that this step was taken was never reset, so at the next call "
            'torch refused to unscale or step again (its error, "unscale_() is being called '
            'after step()", speaks of that earlier step). Call `scaler.update()` after '
            "`scaler.step(optimizer)`, once in every step."
        ),
        hint=Hint(
            where="Look at the last lines of your step, after `scaler.step(optimizer)`.",
            what=(
                "A `GradScaler` takes one `unscale_` and one `step` per optimizer between two "
                "`update()` calls; `update()` also sets the next scale."
            ),
            fix=_FIX,
            lesson="order",
        ),
    ),
    Declared(
        code="scaled-loss-returned",
        name="Scaled loss returned",
        words=(
            "You returned the scaled loss, the loss times the scaler's scale: return "
            "`loss.item()` of the loss itself."
        ),
        hint=Hint(
            where="Look at the value your step returns.",
            what="`scaler.scale(loss)` is only for `backward()`; the loss itself is `loss`.",
            fix=_FIX,
            lesson="order",
        ),
    ),
)

KIND = ExerciseKind(
    name="mixed-precision-step",
    summary="A training step under autocast with a GradScaler: scale, backward, unscale, clip, "
    "step and update, once per batch.",
    record=record_amp_steps,
    case_settings=frozenset({"max_norm", "loss_scale"}),
    trace=TRACE,
    judge=JUDGE,
    models=amp_models,
    failure_named=failure_named,
    sandbox_helpers=(make_scaler,),
    diagnoses=DIAGNOSES,
)
