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
from graders.report import PlotSeries
from graders.sentences import Sentence
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
def expected(spec: CaseSpec) -> tuple[Record, ...]:
    """After each call: the weights, the scale and the loss of the textbook step, computed
    here."""
    case = build_case(spec.harness_spec())
    model, optimizer = case.model, case.optimizer
    scaler = make_scaler(spec.harness_spec())
    assert spec.max_norm is not None  # the kind's cases declare it (configuration_problem)
    found = []
    for x, y in case.inputs:
        optimizer.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = case.loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
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
    "{at}: you returned {yours:.6g}; the loss under autocast was {theirs:.6g}.",
)
NO_FINITE_LOSS = Sentence(
    "mixed-precision-step/no-finite-loss",
    "{at}: you returned no finite number; the loss under autocast was {theirs:.6g}.",
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


def amp_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """None of its own: the exercise's declared bugs name the mistakes."""
    return []


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
    sandbox_helpers=(make_scaler,),
    diagnoses=DIAGNOSES,
)
