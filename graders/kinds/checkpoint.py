"""The `checkpoint` kind: saving and resuming training, `save(model, optimizer) -> dict` and
`resume(model, optimizer, state)` (the exercise's entry point is `resume`; `save` is read from
the same file).

A case trains its model for `steps` batches, calls `save`, then builds a fresh model (other
initial weights) and a fresh optimizer of the same declaration, calls `resume` on them with
the saved state, and trains them on for `steps` more batches. The harness records the fresh
model's parameters (every one, flattened) and its optimizer's state for the first layer's
weight (`graders.harness.optimizer_state`: an SGD momentum buffer, Adam's running averages and
step count) right after `resume`, then after every later step. The case may declare its model
and loss (docs/authoring.md); the words name the parameter that differs (`0.weight[2][1]`).
The grader trains the case's model for all `2 * steps` batches without interruption, itself:
a right save and resume is indistinguishable from that.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import (
    Case,
    Record,
    build_case,
    first_parameter,
    flat_parameters,
    optimizer_state,
    type_name,
)
from graders.judging import (
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    close_values,
    differs,
    first_difference,
    flat_parameter_count,
    unflattened,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.optimizers import STATE_FIELDS
from graders.quoting import learner_text
from graders.report import Diagnosis, PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import CaseTrace, TraceShape


def train_on(case: Case, model: Any, optimizer: Any, batches: list[Any]) -> None:
    """The trusted loop: zero, backward, step on each batch (run in the sandbox too)."""
    for x, y in batches:
        optimizer.zero_grad()
        case.loss_fn(model(x), y).backward()
        optimizer.step()


def resumed_state(model: Any, optimizer: Any) -> Record:
    """Every parameter, flattened, and the optimizer's state for the first layer's weight (run
    in the sandbox too)."""
    return {
        "parameters": flat_parameters(model),
        **optimizer_state(optimizer, first_parameter(model)),
    }


def saved_checkpoint(
    save: Callable[..., Any], spec: dict[str, Any]
) -> tuple[bytes, list[Any], str]:
    """Train the case's model, call `save`, and write what it returned as bytes with
    `torch.save`; then change the saved model and optimizer in place and let them go. The
    bytes, the batches still to train on and the returned value's type are all that leaves this
    frame: a `resume` that copies from the live objects (kept in a global, or found in a frame)
    copies zeros (run in the sandbox too: harness names and train_on only)."""
    import io

    steps = int(spec["steps"])
    case = build_case({**spec, "steps": 2 * steps})
    train_on(case, case.model, case.optimizer, case.inputs[:steps])
    state = save(case.model, case.optimizer)
    written = io.BytesIO()
    try:
        torch.save(state, written)
    except Exception as exc:
        raise TypeError(
            "torch.save could not write what save(model, optimizer) returned: return a dict of "
            "state dicts, tensors and numbers"
        ) from exc
    with torch.no_grad():
        for parameter in case.model.parameters():
            parameter.zero_()
    for kept in case.optimizer.state.values():
        for value in kept.values():
            if isinstance(value, torch.Tensor):
                value.zero_()
    case.optimizer.state.clear()
    return written.getvalue(), case.inputs[steps:], type_name(state)


def record_checkpoint(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """Train, save as bytes, then twice: resume a fresh pair from those bytes (read with
    `torch.load(weights_only=True)`), train it on (run in the sandbox too: harness names,
    saved_checkpoint, train_on and resumed_state only)."""
    import io

    save = getattr(function, "__globals__", {}).get("save")
    if not callable(save):
        raise NameError("name 'save' is not defined: write save(model, optimizer) beside resume")
    checkpoint, batches, state_type = saved_checkpoint(save, spec)
    for _ in range(2):
        # A second pair from the same bytes must agree: `resume` reads the checkpoint it is
        # given, nothing left over from the first.
        fresh = build_case({**spec, "steps": 0, "seed": int(spec["seed"]) + 1})
        try:
            state = torch.load(io.BytesIO(checkpoint), weights_only=True)
        except Exception as exc:
            raise TypeError(
                "torch.load(..., weights_only=True) could not read back what save(model, "
                "optimizer) returned: return a dict of state dicts, tensors and numbers"
            ) from exc
        function(fresh.model, fresh.optimizer, state)
        records.append(resumed_state(fresh.model, fresh.optimizer))
        for batch in batches:
            train_on(fresh, fresh.model, fresh.optimizer, [batch])
            records.append(resumed_state(fresh.model, fresh.optimizer))
    return {"state_type": state_type}


def records_per_case(spec: CaseSpec) -> int:
    """Two resumed pairs: after `resume`, then after each later step."""
    return 2 * (spec.steps + 1)


TRACE = TraceShape(
    record_fields={"parameters": "parameters", **STATE_FIELDS},
    final_fields={"state_type": "text"},
    most_records=records_per_case,
    parameter_count=flat_parameter_count,
)


@functools.cache
def uninterrupted(spec: CaseSpec) -> list[dict[str, Any]]:
    """Every parameter (flattened, a tensor) and the optimizer's state for the first layer's
    weight (as recorded) after step `steps` and every later one of `2 * steps` steps without
    interruption, computed here."""
    case = build_case({**spec.harness_spec(), "steps": 2 * spec.steps})
    model, optimizer = case.model, case.optimizer
    train_on(case, model, optimizer, case.inputs[: spec.steps])
    states = [_state(model, optimizer)]
    for batch in case.inputs[spec.steps :]:
        train_on(case, model, optimizer, [batch])
        states.append(_state(model, optimizer))
    return states


def _state(model: Any, optimizer: Any) -> dict[str, Any]:
    return {
        "parameters": torch.tensor(flat_parameters(model)),
        **optimizer_state(optimizer, first_parameter(model)),
    }


CHECKS = {
    "runs": RAN_TO_THE_END,
    "returns-dict": Sentence("checkpoint/passed-returns-dict", "`save` returns a dict."),
    "model-restored": Sentence(
        "checkpoint/passed-model-restored", "After `resume` the model holds the saved weights."
    ),
    "optimizer-restored": Sentence(
        "checkpoint/passed-optimizer-restored",
        "After `resume` the optimizer holds the saved state (momentum buffers, Adam's running "
        "averages and step count).",
    ),
    "training-continues": Sentence(
        "checkpoint/passed-training-continues",
        "Training after `resume` equals training without interruption, step by step.",
    ),
}

# What the checks say (graders.sentences): what differs, the learner's first.
AT_CASE = Sentence("checkpoint/at-case", "In {case}")
AT_RESUME = Sentence("checkpoint/at-resume", "{at}, after `resume`")
AT_SECOND_RESUME = Sentence(
    "checkpoint/at-second-resume", "{at}, after `resume` a second time from the same checkpoint"
)
NOT_A_DICT = Sentence("checkpoint/not-a-dict", "{at}: `save` returned a {type}, not a dict.")
MODEL_NOT_RESTORED = Sentence(
    "checkpoint/model-not-restored",
    "{at} the model does not hold the saved weights: {difference}. Load them with "
    "`model.load_state_dict(...)` into the model you were given.",
)
OPTIMIZER_NOT_RESTORED = Sentence(
    "checkpoint/optimizer-not-restored",
    "{at} the optimizer holds {held} for the model's (first layer's) weight, not the saved one. "
    "Save "
    "`optimizer.state_dict()` too and load it with `optimizer.load_state_dict(...)`; load the "
    "weights into the model's own parameters (`model.load_state_dict(...)`), the ones the "
    "optimizer holds.",
)
NO_STATE = Sentence("checkpoint/no-state", "no state")
ANOTHER_STATE = Sentence("checkpoint/another-state", "another state")
TRAINING_DIFFERS = Sentence(
    "checkpoint/training-differs",
    "{at}, {steps} step(s) later, the weights differ from training without interruption: "
    "{difference}.",
)


def _model_restored(record: Record, saved: dict[str, Any]) -> bool:
    return close_values(record["parameters"], saved["parameters"])


def _optimizer_restored(record: Record, saved: dict[str, Any]) -> bool:
    """Every field of the state the optimizer keeps (STATE_FIELDS) as saved: absent where the
    saved one is absent, close where it is there."""
    for field in STATE_FIELDS:
        mine, expected = record[field], saved[field]
        if expected is None:
            if mine is not None:
                return False
        elif field == "opt_step":
            if mine is None or not within_tolerance(mine, expected):
                return False
        elif not close_values(mine, as_tensor(expected)):
            return False
    return True


def _state_is_empty(record: Record) -> bool:
    return all(record[field] is None for field in STATE_FIELDS)


def resumed_pairs(spec: CaseSpec, trace: CaseTrace) -> list[tuple[Sentence, list[Record]]]:
    """The records of each pair resumed from the checkpoint, with how a message names it."""
    half = spec.steps + 1
    return [(AT_RESUME, trace.records[:half]), (AT_SECOND_RESUME, trace.records[half:])]


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    at = AT_CASE(case=findings.case())
    right = uninterrupted(spec)
    assert learner.final is not None
    if learner.final["state_type"] != "dict":
        findings.fail(
            "returns-dict", NOT_A_DICT(at=at, type=learner_text(learner.final["state_type"]))
        )
    for when, records in resumed_pairs(spec, learner):
        _judge_pair(findings, when(at=at), spec, records, right)
    return findings


def _difference(spec: CaseSpec, mine: Any, theirs: torch.Tensor) -> Said:
    """Where the learner's parameters (recorded, flattened) differ from the expected ones, by
    the parameter's name (`weight[0][1]`, `0.weight[3][2]`)."""
    return differs(*first_difference(unflattened(spec, mine), unflattened(spec, theirs)))


def _judge_pair(
    findings: CaseFindings,
    at: Said,
    spec: CaseSpec,
    records: list[Record],
    right: list[dict[str, Any]],
) -> None:
    resumed = records[0]
    if not _model_restored(resumed, right[0]):
        difference = _difference(spec, resumed["parameters"], right[0]["parameters"])
        findings.fail("model-restored", MODEL_NOT_RESTORED(at=at, difference=difference))
    if not _optimizer_restored(resumed, right[0]):
        held = (NO_STATE if _state_is_empty(resumed) else ANOTHER_STATE)()
        findings.fail("optimizer-restored", OPTIMIZER_NOT_RESTORED(at=at, held=held))
    for index, (record, state) in enumerate(zip(records[1:], right[1:], strict=True)):
        if not close_values(record["parameters"], state["parameters"]):
            difference = _difference(spec, record["parameters"], state["parameters"])
            findings.fail(
                "training-continues",
                TRAINING_DIFFERS(at=at, steps=index + 1, difference=difference),
            )
            break


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


def checkpoint_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """What `resume` left out, read from the fresh model and optimizer right after it, against
    the state the grader computed: each name is an observed fact of the run."""
    found: set[Diagnosis] = set()
    for spec in exercise.cases:
        trace = traces[spec.id]
        if trace.error is not None or not trace.records:
            return []
        saved = uninterrupted(spec)[0]
        for _, records in resumed_pairs(spec, trace):
            if not _model_restored(records[0], saved):
                found.add("model-not-restored")
            if not _optimizer_restored(records[0], saved):
                found.add("optimizer-state-lost")
    order: tuple[Diagnosis, ...] = ("optimizer-state-lost", "model-not-restored")
    codes = tuple(code for code in order if code in found)
    return [Explanation(codes, "checkpoint")] if codes else []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("state_type", ("dict",)),
    judge_case=judge_case,
    plots=plots,
)


# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="optimizer-state-lost",
        hint=Hint(
            where=(
                "Look at what `save` puts in the dict, and what `resume` loads into the optimizer."
            ),
            what=(
                "The optimizer's state (its momentum buffers) is not saved or not loaded, so "
                "after a resume momentum starts again from nothing and training takes different "
                "steps."
            ),
            fix="""Save and load both state dicts:

```python
def save(model, optimizer):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

def resume(model, optimizer, state):
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
```""",
            lesson="state-dicts",
        ),
        name="Optimizer state not restored",
        words=(
            "Your checkpoint does not bring back the optimizer's state for the model's weights: "
            "after `resume` the optimizer holds no saved state (momentum buffers, running "
            "averages) for them, so training does not go on as it would have. Save "
            "`optimizer.state_dict()` with the model's, load it with "
            "`optimizer.load_state_dict(...)`, and load the weights into the model's own "
            "parameters (`model.load_state_dict(...)`), which the optimizer holds."
        ),
    ),
    Declared(
        code="model-not-restored",
        hint=Hint(
            where="Look at which model `resume` loads the saved weights into.",
            what=(
                "After `resume`, the model you were given does not hold the saved weights: they "
                "were not loaded, or were loaded into another object."
            ),
            fix="""Load the saved weights into the model passed to `resume`:

```python
def resume(model, optimizer, state):
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
```""",
            lesson="state-dicts",
        ),
        name="Model weights not restored",
        words=(
            "After `resume` the model you were given does not hold the saved weights. Load them "
            "into it, `model.load_state_dict(state[...])`, rather than into a new model or a "
            "copy."
        ),
    ),
)

KIND = ExerciseKind(
    name="checkpoint",
    summary="Saving a model and its optimizer, and resuming training from the saved state.",
    record=record_checkpoint,
    case_settings=frozenset({"model", "loss"}),
    trace=TRACE,
    judge=JUDGE,
    models=checkpoint_models,
    sandbox_helpers=(train_on, resumed_state, saved_checkpoint),
    diagnoses=DIAGNOSES,
)
