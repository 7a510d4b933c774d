"""The `gradient-pair` kind: a function that returns the gradient after one backward pass and
after a second one, `accumulation_demo(model, loss_fn, x, y) -> (first, second)`.

The learner proves what the lesson says: run backward twice without clearing and `.grad` holds
the sum of both. The function returns both gradients as copies and takes no optimizer step.
The gradient is the first parameter's (`model.weight`; on a declared mlp, `model[0].weight`):
the case may declare its model and loss (docs/authoring.md), and the words name the parameter
as the code reaches it (`judging.in_code`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import CallRecorder, Record, build_case, parameters_of, type_name, values_of
from graders.judging import (
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    batch_of,
    call_stream,
    case_data,
    cleared,
    close,
    close_values,
    differs,
    first_difference,
    in_code,
    loss_and_gradients,
    said_times,
)
from graders.kind import ExerciseKind
from graders.quoting import learner_text
from graders.report import PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import PARAMETERS, CaseTrace, TraceShape, one_record_per_case


def record_pair(function: Callable[..., Any], spec: dict[str, Any], records: list[Record]) -> None:
    """One call; the two gradients of the first parameter (the first layer's weight) it
    returns, before and after the harness zeroes `.grad` in
    place: a returned tensor that is the live `.grad` changes, a copy does not. (Run in the
    sandbox too: harness names only.)
    """
    case = build_case(spec)
    recorder = CallRecorder(case)
    x, y = case.inputs[0]
    returned = function(case.model, case.loss_fn, x.clone(), y.clone())
    pair = returned if isinstance(returned, tuple) and len(returned) == 2 else (None, None)
    record = {
        **parameters_of(case.model),
        "result_type": type_name(returned),
        "first": values_of(pair[0]),
        "second": values_of(pair[1]),
        "calls": recorder.take(),
    }
    for parameter in case.model.parameters():
        if parameter.grad is not None:
            parameter.grad.zero_()
    record["first_after_clearing"] = values_of(pair[0])
    record["second_after_clearing"] = values_of(pair[1])
    records.append(record)


TRACE = TraceShape(
    record_fields={
        **PARAMETERS,
        "result_type": "text",
        "first": "first?",
        "second": "first?",
        "first_after_clearing": "first?",
        "second_after_clearing": "first?",
        "calls": "calls",
    },
    final_fields=None,
    most_records=one_record_per_case,
)

CHECKS = {
    "runs": RAN_TO_THE_END,
    "returns-pair": Sentence(
        "gradient-pair/passed-returns-pair",
        "Returns a tuple of two tensors.",
    ),
    "first-is-fresh": Sentence(
        "gradient-pair/passed-first-is-fresh",
        "The first gradient is exactly one backward pass's.",
    ),
    "second-is-double": Sentence(
        "gradient-pair/passed-second-is-double",
        "The second gradient is two backward passes' gradient added up: twice one pass's.",
    ),
    "copies": Sentence(
        "gradient-pair/passed-copies",
        "Both are copies: clearing `.grad` afterwards does not change them.",
    ),
    "weights-unchanged": Sentence(
        "gradient-pair/passed-weights-unchanged",
        "The weights are unchanged: no optimizer step.",
    ),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first;
# a cause only from what the harness recorded.
AT_CASE = Sentence("gradient-pair/at-case", "In {case}")
AT = Sentence("gradient-pair/at", "{at}: {what}")
NOT_A_PAIR = Sentence(
    "gradient-pair/not-a-pair",
    "{at}: your function returned a {type}; return `(first, second)`, two tensors.",
)
NO_TENSORS = Sentence(
    "gradient-pair/no-tensors",
    "{at}: your function returned no gradient tensors, so there is no copy to check. Return "
    "`{grad}.clone()` as each of `(first, second)`.",
)
LIVE_GRAD = Sentence(
    "gradient-pair/live-grad",
    "{at}: after your function returned, zeroing `.grad` in place changed the {which} tensor "
    "you returned: it is the live `.grad`, not a copy. Return `{grad}.clone()`.",
)
FIRST_AND_SECOND = Sentence("gradient-pair/first-and-second", "first and second")
WEIGHTS_CHANGED = Sentence(
    "gradient-pair/weights-changed",
    "{at}: your function changed the weights: {difference}. This exercise takes no optimizer step.",
)
BACKWARD_COUNT = Sentence(
    "gradient-pair/backward-count",
    "your code ran backward() {count}. The second gradient must come from a second backward() "
    "pass that PyTorch adds to `.grad`, not be computed from the first.",
)
CLEARED_BETWEEN = Sentence(
    "gradient-pair/cleared-between",
    "your code called zero_grad() between the two backward() passes.",
)
NOT_THE_SUM = Sentence(
    "gradient-pair/not-the-sum",
    "after your function, `{grad}` is not the sum of the two passes: the second "
    "gradient must be what `.grad` accumulated, not a value computed beside it.",
)
FIRST_NONE = Sentence("gradient-pair/first-none", "the first gradient you returned is `None`.")
FIRST_DOUBLE = Sentence(
    "gradient-pair/first-double",
    "the first gradient is already twice one pass's: it was taken after the second backward(), "
    "or it is the live `.grad`, which the second pass added to. Clone it right after the first "
    "backward().",
)
FIRST_DIFFERS = Sentence(
    "gradient-pair/first-differs",
    "the first gradient is not one backward pass's gradient: {difference}.",
)
SECOND_NONE = Sentence("gradient-pair/second-none", "the second gradient you returned is `None`.")
SECOND_SINGLE = Sentence(
    "gradient-pair/second-single",
    "the second gradient equals one pass's: the gradients were cleared between the two passes, "
    "so nothing accumulated. Do not call zero_grad() in between.",
)
SECOND_DIFFERS = Sentence(
    "gradient-pair/second-differs",
    "the second gradient is not twice one pass's: {difference}.",
)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    data = case_data(spec)
    record = learner.records[0]
    at = AT_CASE(case=findings.case())
    fresh = loss_and_gradients(spec, data.parameters, *batch_of(data.inputs[0]))[1][data.first]
    grad = in_code(data.first) + ".grad"
    first, second = record["first"], record["second"]

    if record["result_type"] != "tuple" or first is None or second is None:
        findings.fail("returns-pair", NOT_A_PAIR(at=at, type=learner_text(record["result_type"])))
    if not close_values(first, fresh):
        findings.fail("first-is-fresh", AT(at=at, what=_describe_first(first, fresh)))
    if not close_values(second, 2 * fresh):
        findings.fail("second-is-double", AT(at=at, what=_describe_second(second, fresh)))
    else:
        shown = _undemonstrated(record, fresh, data.first)
        if shown is not None:
            findings.fail("second-is-double", AT(at=at, what=shown))
    changed = [
        name
        for name in ("first", "second")
        if record[name] is not None and record[f"{name}_after_clearing"] != record[name]
    ]
    # A tuple holding anything but two tensors holds no copy (a placeholder `...`, None). A
    # list or other container is not looked inside: returns-pair says what to return instead.
    if record["result_type"] == "tuple" and (first is None or second is None):
        findings.fail("copies", NO_TENSORS(at=at, grad=grad))
    if changed:
        which: Said | str = FIRST_AND_SECOND() if len(changed) == 2 else changed[0]
        findings.fail("copies", LIVE_GRAD(at=at, which=which, grad=grad))
    after = {name: as_tensor(record[name]) for name in data.parameters}
    if not all(close(after[name], data.parameters[name]) for name in after):
        findings.fail(
            "weights-unchanged",
            WEIGHTS_CHANGED(at=at, difference=differs(*first_difference(after, data.parameters))),
        )
    return findings


def _undemonstrated(record: dict[str, Any], fresh: torch.Tensor, first: str) -> Said | None:
    """Why the recorded calls and `.grad` do not show the accumulation, or None when they do.

    A second gradient worth twice the first can be computed from one pass (`2 * g`): the
    exercise asks to show PyTorch doing it, so the calls must be two backward() passes with no
    zero_grad() between them, and `.grad` must hold their sum (or have been cleared after them).
    """
    calls: list[str] = record["calls"]
    backwards = [i for i, call in enumerate(calls) if call == "backward"]
    if len(backwards) != 2:
        return BACKWARD_COUNT(count=said_times(len(backwards)))
    if "zero_grad" in calls[backwards[0] : backwards[1]]:
        return CLEARED_BETWEEN()
    held = record[f"{first}_grad"]
    cleared_after = "zero_grad" in calls[backwards[1] :] and cleared(held)
    if not (close_values(held, 2 * fresh) or cleared_after):
        return NOT_THE_SUM(grad=in_code(first) + ".grad")
    return None


def _describe_first(first: object, fresh: torch.Tensor) -> Said:
    if first is None:
        return FIRST_NONE()
    if close(as_tensor(first), 2 * fresh):
        return FIRST_DOUBLE()
    return FIRST_DIFFERS(difference=differs("first", as_tensor(first), fresh))


def _describe_second(second: object, fresh: torch.Tensor) -> Said:
    if second is None:
        return SECOND_NONE()
    if close(as_tensor(second), fresh):
        return SECOND_SINGLE()
    return SECOND_DIFFERS(difference=differs("second", as_tensor(second), 2 * fresh))


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("result_type", ("tuple",)),
    judge_case=judge_case,
    plots=plots,
)


def demonstration_models(
    kind: ExerciseKind, exercise: Exercise, traces: Traces
) -> list[Explanation]:
    """accumulation_demo: returned tensors that are the live `.grad`, passes cleared between,
    copies taken after the wrong number of passes.

    Each model predicts the two returned tensors from the case's one-pass gradient g (computed
    here): the reference returns copies g and 2g; a live `.grad` returned is 2g and reads zero
    once the harness clears `.grad`; clearing between the passes returns g and g; copies taken
    after a and b of the recorded backward passes return a*g and b*g.
    """
    aliased, cleared_between = True, True
    any_alias = False
    passes: set[tuple[int, int]] = set()
    for spec in exercise.cases:
        record = traces[spec.id].records[0]
        data = case_data(spec)
        fresh = loss_and_gradients(spec, data.parameters, *batch_of(data.inputs[0]))[1][data.first]
        if record["first"] is None or record["second"] is None:
            return []
        backwards = call_stream(traces[spec.id]).count("backward")
        live = {
            name: record[f"{name}_after_clearing"] != record[name] for name in ("first", "second")
        }
        any_alias = any_alias or any(live.values())
        expected = {"first": fresh, "second": 2 * fresh}
        aliased = aliased and backwards == 2
        for name, is_live in live.items():
            if is_live:
                aliased = aliased and close_values(record[name], 2 * fresh)
                aliased = aliased and cleared(record[f"{name}_after_clearing"])
            else:
                aliased = aliased and close_values(record[name], expected[name])
        cleared_between = (
            cleared_between
            and backwards == 2
            and not any(live.values())
            and close_values(record["first"], fresh)
            and close_values(record["second"], fresh)
        )
        first = _whole_passes(record["first"], fresh, backwards)
        second = _whole_passes(record["second"], fresh, backwards)
        if any(live.values()) or first is None or second != backwards or first > second:
            passes.add((0, 0))  # not copies of whole backward passes
        else:
            passes.add((first, second))
    found = []
    if aliased and any_alias:
        found.append(Explanation(("returns-live-gradient",), "live-gradient"))
    if cleared_between:
        found.append(Explanation(("cleared-between-passes",), "cleared-between"))
    if len(passes) == 1 and (counted := passes.pop()) not in ((0, 0), (1, 2)):
        found.append(
            Explanation(
                ("wrong-number-of-passes",),
                "passes",
                PASSES_HELD(first=_passes(counted[0]), second=_passes(counted[1])),
            )
        )
    return found


def _whole_passes(values: Any, fresh: torch.Tensor, backwards: int) -> int | None:
    """How many backward passes' gradients a returned tensor holds, when a whole number does."""
    return next(
        (n for n in range(1, backwards + 1) if close_values(values, n * fresh)),
        None,
    )


PASSES_HELD = Sentence(
    "gradient-pair/passes-held",
    "Your first tensor holds {first}' gradients and your second {second}'.",
)
ONE_PASS = Sentence("gradient-pair/one-pass", "one pass")
TWO_PASSES = Sentence("gradient-pair/two-passes", "two passes")
THREE_PASSES = Sentence("gradient-pair/three-passes", "three passes")
COUNT_PASSES = Sentence("gradient-pair/count-passes", "{count} passes")


def _passes(count: int) -> Said:
    said = {1: ONE_PASS, 2: TWO_PASSES, 3: THREE_PASSES}.get(count)
    return said() if said is not None else COUNT_PASSES(count=count)


# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="returns-live-gradient",
        hint=Hint(
            where=(
                "Look at what you keep after each backward pass: the `.grad` tensor itself, or "
                "a copy?"
            ),
            what=(
                "`model.weight.grad` (on an `nn.Sequential`, `model[0].weight.grad`) is one "
                "tensor that the next `backward()` adds into. "
                "Keeping it without a copy means both values you return are the final one."
            ),
            fix="""```python
# on an nn.Sequential: model[0].weight.grad
first = model.weight.grad.clone()
loss_fn(model(x), y).backward()
second = model.weight.grad.clone()
```""",
        ),
        name="Returned the live gradient",
        words=(
            "You returned `.grad` itself, not a copy. `.grad` is one tensor that PyTorch keeps "
            "updating: the second `backward()` added to the very tensor you kept as the first. "
            "Clone it (`.grad.clone()`) to keep its value at that moment."
        ),
    ),
    Declared(
        code="cleared-between-passes",
        hint=Hint(
            where="Look at what happens between the two backward passes.",
            what=(
                "Clearing the gradients between the passes hides what the exercise asks you to "
                "show: without it the second gradient is the first one added again."
            ),
            fix="""Do not clear between the passes:

```python
# on an nn.Sequential: model[0].weight.grad
loss_fn(model(x), y).backward()
first = model.weight.grad.clone()
loss_fn(model(x), y).backward()
second = model.weight.grad.clone()
```""",
        ),
        name="Cleared between passes",
        words=(
            "You cleared the gradients between the two passes, so the second equals the first: "
            "nothing accumulated. The point of this exercise is to run backward twice *without* "
            "clearing: PyTorch adds each new gradient to whatever is already in `.grad`."
        ),
    ),
    Declared(
        code="wrong-number-of-passes",
        hint=Hint(
            where="Count the backward passes before each value you keep.",
            what=(
                "The first value is the gradient after one backward pass, the second after "
                "exactly two."
            ),
            fix="""```python
# on an nn.Sequential: model[0].weight.grad
loss_fn(model(x), y).backward()
first = model.weight.grad.clone()
loss_fn(model(x), y).backward()
second = model.weight.grad.clone()
```""",
        ),
        name="Wrong number of passes",
        words=(
            "Your copies were not taken after one and after two backward passes. Run "
            "`backward()` once and copy `.grad`, then run it a second time, without clearing, "
            "and copy again: PyTorch adds each new gradient to whatever is already in `.grad`, "
            "so the second copy is the sum of both passes."
        ),
    ),
)

KIND = ExerciseKind(
    name="gradient-pair",
    summary="A function that returns copies of the gradient after one and after two passes.",
    record=record_pair,
    case_settings=frozenset({"model", "loss"}),
    trace=TRACE,
    judge=JUDGE,
    models=demonstration_models,
    diagnoses=DIAGNOSES,
)
