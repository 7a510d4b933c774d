"""The `gradient-reading` kind: a function that reads the gradients and returns a number,
`total_grad_magnitude(model)`: the sum of |grad| over all parameters, None counting as zero.

Cases leave `.grad` present, released by zero_grad() (None), filled with zeros, or mixed (every
bias's released). The function must read the gradients without changing them. The case may
declare its model and loss (docs/authoring.md): every parameter's gradient is compared by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import Case, Record, build_case, number_of, parameters_of, type_name
from graders.judging import (
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    close,
    same_value,
    then,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.quoting import learner_text
from graders.report import Diagnosis, PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import PARAMETERS, CaseTrace, TraceShape, one_record_per_case


def prepare_gradients(case: Case, state: str) -> nn.Module:
    """Run one backward pass, then leave `.grad` as the state says: present, released (none),
    filled with zeros, or mixed (the weights' present, the biases' released)."""
    model = case.model
    x, y = case.inputs[0]
    case.loss_fn(model(x), y).backward()
    if state == "none":
        case.optimizer.zero_grad()
    elif state == "zeros":
        case.optimizer.zero_grad(set_to_none=False)
    elif state == "mixed":
        for name, parameter in model.named_parameters():
            if name.split(".")[-1] == "bias":
                parameter.grad = None
    return model


def record_reading(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> None:
    """One call on a model whose `.grad` is in the state the case names (run in the sandbox
    too: harness names and prepare_gradients only)."""
    case = build_case(spec)
    model = prepare_gradients(case, spec.get("grad_state", "present"))
    returned = function(model)
    records.append(
        {**parameters_of(model), "value": number_of(returned), "value_type": type_name(returned)}
    )


TRACE = TraceShape(
    record_fields={**PARAMETERS, "value": "number", "value_type": "text"},
    final_fields=None,
    most_records=one_record_per_case,
)

CHECKS = {
    "runs": RAN_TO_THE_END,
    "magnitude-correct": Sentence(
        "gradient-reading/passed-magnitude",
        "Returns the sum of |grad| over all parameters in every case.",
    ),
    "grads-unchanged": Sentence(
        "gradient-reading/passed-grads-unchanged", "Leaves every gradient as it found it."
    ),
    "returns-float": Sentence("gradient-reading/passed-returns-float", "Returns a Python float."),
}

STATES = {
    "present": Sentence("gradient-reading/state-present", "gradients present"),
    "none": Sentence("gradient-reading/state-none", "`.grad` released by zero_grad() (None)"),
    "zeros": Sentence(
        "gradient-reading/state-zeros",
        "`.grad` filled with zeros by zero_grad(set_to_none=False)",
    ),
    "mixed": Sentence(
        "gradient-reading/state-mixed", "the weight's gradient present and the bias's None"
    ),
}
# A declared mlp's mixed state: every layer's.
MIXED_LAYERS = Sentence(
    "gradient-reading/state-mixed-layers", "the weights' gradients present and the biases' None"
)

# What the checks say (graders.sentences): what differs and by how much, the learner's first.
AT_CASE = Sentence("gradient-reading/at-case", "In {case} ({state})")
WITHOUT_ABS = Sentence(
    "gradient-reading/without-abs",
    "{at}: the magnitude is wrong. You returned {value:.6g}, the sum without abs(): gradients "
    "can be negative.",
)
NOTHING_NUMERIC = Sentence("gradient-reading/nothing-numeric", "nothing numeric")
MAGNITUDE_DIFFERS = Sentence(
    "gradient-reading/magnitude-differs",
    "{at}: the magnitude is wrong. You returned {value:.6g}; the sum of |grad| is {expected:.6g}.",
)
RELEASED_IS_ZERO = Sentence(
    "gradient-reading/released-is-zero", "A released gradient (None) counts as zero."
)
GRADS_CHANGED = Sentence(
    "gradient-reading/grads-changed",
    "{at}: your function changed {names}. Read the gradients; do not clear or modify them.",
)
BOTH_GRADS = Sentence("gradient-reading/both-grads", "`weight.grad` and `bias.grad`")
NOT_FLOAT = Sentence(
    "gradient-reading/not-float",
    "{at}: your function returned a {type}, not a `float`. Use `.item()` or `float(...)`.",
)


@functools.cache
def expected_magnitudes(spec: CaseSpec) -> tuple[float, float, dict[str, Any]]:
    """The right answer, the answer without abs(), and the gradients as the case leaves them."""
    case = build_case(spec.harness_spec())
    model = prepare_gradients(case, spec.grad_state)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    state = {
        f"{name}_grad": None if parameter.grad is None else parameter.grad.tolist()
        for name, parameter in model.named_parameters()
    }
    return (
        float(sum(g.abs().sum().item() for g in grads)),
        float(sum(g.sum().item() for g in grads)),
        state,
    )


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    record = learner.records[0]
    expected, without_abs, grads_before = expected_magnitudes(spec)
    at = AT_CASE(case=findings.case(), state=_state_said(spec))
    value = record["value"]
    if value is None or not within_tolerance(value, expected):
        if value is not None and within_tolerance(value, without_abs):
            said = WITHOUT_ABS(at=at, value=value)
        else:
            shown: Said | float = NOTHING_NUMERIC() if value is None else value
            said = MAGNITUDE_DIFFERS(at=at, value=shown, expected=expected)
        released = RELEASED_IS_ZERO() if spec.grad_state in ("none", "mixed") else None
        findings.fail("magnitude-correct", then(said, released))
    changed = [
        name
        for name in grads_before
        if not same_value(name, record[name], grads_before[name])
        or (record[name] is None) != (grads_before[name] is None)
    ]
    if changed:
        names = _grads_said(changed)
        findings.fail("grads-unchanged", GRADS_CHANGED(at=at, names=names))
    if record["value_type"] != "float":
        findings.fail("returns-float", NOT_FLOAT(at=at, type=learner_text(record["value_type"])))
    return findings


def _state_said(spec: CaseSpec) -> Said:
    if spec.grad_state == "mixed" and spec.model.kind != "linear":
        return MIXED_LAYERS()
    return STATES[spec.grad_state]()


def _grads_said(changed: list[str]) -> Said | str:
    """The gradients changed (record fields, `0.weight_grad`), as the learner reads them:
    `0.weight.grad`, `2.bias.grad`; both of a linear model's in a few words."""
    if changed == ["weight_grad", "bias_grad"]:
        return BOTH_GRADS()
    return ", ".join(f"`{name.removesuffix('_grad')}.grad`" for name in changed)


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("value_type", ("float",)),
    judge_case=judge_case,
    plots=plots,
)


def magnitude_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """total_grad_magnitude: the sum without abs(), and gradients changed by a function that
    should only read them."""
    changed, all_right = False, True
    for spec in exercise.cases:
        record = traces[spec.id].records[0]
        expected, no_abs, before = expected_magnitudes(spec)
        value = record["value"]
        if value is None:
            return []
        right = _near_value(value, expected)
        if not (right or _near_value(value, no_abs)):
            return []
        all_right = all_right and right
        changed = changed or not all(
            same_value(name, record[name], before[name])
            and (record[name] is None) == (before[name] is None)
            for name in before
        )
    codes: list[Diagnosis] = [] if all_right else ["missing-abs"]
    if changed:
        codes.append("modifies-gradients")
    return [Explanation(tuple(codes), "magnitude")] if codes else []


def _near_value(value: float, expected: float) -> bool:
    return close(torch.tensor([value]), torch.tensor([expected]))


# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="missing-abs",
        hint=Hint(
            where="Look at how you add up each gradient's entries.",
            what=(
                "Positive and negative entries cancel in a plain sum: the magnitude is the sum "
                "of their absolute values."
            ),
            fix="""```python
total += parameter.grad.abs().sum().item()
```""",
        ),
        name="Absolute value missing",
        words=(
            "You summed the gradients themselves, not their absolute values: positive and "
            "negative entries cancel out. Use `.abs().sum()`."
        ),
    ),
    Declared(
        code="modifies-gradients",
        hint=Hint(
            where=(
                "Look for anything that writes to `.grad`: `zero_grad()`, `zero_()`, or an "
                "in-place operation."
            ),
            what=(
                "The function must only read the gradients; it changes them, so the training "
                "that uses them afterwards goes wrong."
            ),
            fix="""Read without changing (`.abs()` makes a new tensor; `.abs_()` would not):

```python
total += parameter.grad.abs().sum().item()
```""",
        ),
        name="Gradients modified",
        words=(
            "Your function changes the gradients it measures. A function that reads `.grad` "
            "must leave it as it was: the code that runs after it still needs it."
        ),
    ),
)

KIND = ExerciseKind(
    name="gradient-reading",
    summary="A function that reads the gradients, leaves them as they are, and returns a number.",
    record=record_reading,
    case_settings=frozenset({"grad_state", "model", "loss"}),
    trace=TRACE,
    judge=JUDGE,
    models=magnitude_models,
    sandbox_helpers=(prepare_gradients,),
    diagnoses=DIAGNOSES,
)
