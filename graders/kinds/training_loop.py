"""The `training-loop` kind: a whole loop, `train(model, optimizer, loss_fn, batches, epochs)`.

The harness records the state after every optimizer step (at most `most_loop_records`); the
weights at the end of each epoch are those after its last step. The loop returns the loss of
every iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graders.exercise import CaseSpec
from graders.fitting import stepping_models
from graders.harness import (
    MAX_TYPE_NAME_CHARS,
    CallRecorder,
    Record,
    build_case,
    number_of,
    parameters_of,
    type_name,
)
from graders.judging import (
    AT_CASE,
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    case_data,
    close,
    differs,
    first_difference,
    plot_series,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.quoting import learner_text
from graders.replay import WHOLE_LOOP
from graders.report import PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import PARAMETERS, CaseTrace, TraceShape


def most_loop_records(spec: dict[str, Any]) -> int:
    """The most optimizer steps (and returned losses) a case records: four times the steps a
    right loop makes, enough to see a loop that steps twice per batch, bounded whatever the
    learner's loop does."""
    return 4 * int(spec["epochs"]) * int(spec["steps"])


def record_loop(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """One call that trains for several epochs; the state after every step (run in the sandbox
    too: harness names and most_loop_records only)."""
    case = build_case(spec)

    most = most_loop_records(spec)

    def snapshot() -> None:
        if len(records) < most:
            records.append({**parameters_of(case.model), "calls": recorder.take()})

    recorder = CallRecorder(case, on_step=snapshot)
    batches = [(x.clone(), y.clone()) for x, y in case.inputs]
    returned = function(case.model, case.optimizer, case.loss_fn, batches, int(spec["epochs"]))
    losses, losses_type = None, type_name(returned)
    if isinstance(returned, list | tuple):
        losses = [number_of(v) for v in returned[:most]]
        # A list of loss tensors holds numbers too: the type says what they were.
        odd = [type_name(v) for v in returned[:most] if not isinstance(v, float)]
        if odd:
            losses_type = f"{losses_type} of {odd[0]}"[:MAX_TYPE_NAME_CHARS]
    return {
        **parameters_of(case.model),
        "calls": recorder.take(),
        "losses": losses,
        "losses_type": losses_type,
    }


def record_limit(spec: CaseSpec) -> int:
    return most_loop_records(spec.harness_spec())


TRACE = TraceShape(
    record_fields={**PARAMETERS, "calls": "calls"},
    final_fields={**PARAMETERS, "calls": "calls", "losses": "numbers", "losses_type": "text"},
    most_records=record_limit,
    exact=False,
)

CHECKS = {
    "runs": RAN_TO_THE_END,
    "step-count": Sentence(
        "training-loop/passed-step-count",
        "The loop steps once per batch, every epoch.",
    ),
    "epoch-weights-match": Sentence(
        "training-loop/passed-epoch-weights",
        "After every epoch the weights equal the reference loop's.",
    ),
    "losses-match": Sentence(
        "training-loop/passed-losses",
        "The returned losses equal the reference loop's, iteration by iteration.",
    ),
    "returns-list": Sentence(
        "training-loop/passed-returns-list",
        "Returns a list with one float loss per iteration.",
    ),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first.
STEPPED = Sentence(
    "training-loop/stepped",
    "{at}: your loop stepped {count} times; {epochs} epochs of {batches} batches step "
    "{iterations} times.",
)
STEPPED_AT_LEAST = Sentence(
    "training-loop/stepped-at-least",
    "{at}: your loop stepped at least {count} times; {epochs} epochs of {batches} batches step "
    "{iterations} times.",
)
UNFINISHED = Sentence("training-loop/unfinished", "{at}: epoch {epoch} never finished its steps.")
EPOCH_WEIGHTS_DIFFER = Sentence(
    "training-loop/epoch-weights-differ",
    "{at}: after epoch {epoch} your weights differ from the reference loop's: {difference}.",
)
NOT_A_LIST = Sentence(
    "training-loop/not-a-list",
    "{at}: your loop returned a {type}; return a list of floats.",
)
NO_LOSSES = Sentence("training-loop/no-losses", "{at}: no list of losses to compare.")
NOT_FLOATS = Sentence(
    "training-loop/not-floats",
    "{at}: your loop returned a list of {type} values, not of floats. Append `loss.item()`.",
)
TENSORS_KEPT = Sentence(
    "training-loop/tensors-kept",
    "{at}: your loop returned a list of {type} values, not of floats. A loss tensor kept in a "
    "list keeps its whole graph alive, so memory grows with every batch. Append `loss.item()`.",
)
LOSS_COUNT = Sentence(
    "training-loop/loss-count",
    "{at}: your loop returned {count} values; {iterations} iterations need {iterations} float "
    "losses (use `loss.item()`).",
)
LOSS_DIFFERS = Sentence(
    "training-loop/loss-differs",
    "{at}: the loss of iteration {iteration} differs: you recorded {mine:.6g}, the reference "
    "{theirs:.6g}.",
)
LOSSES_COUNTED = Sentence(
    "training-loop/losses-counted",
    "{at}: {count} losses instead of {expected}.",
)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    at = AT_CASE(case=findings.case())
    iterations = spec.epochs * spec.steps
    steps = len(learner.records)
    if steps != iterations:
        # The harness stops recording at its limit: past it, the count is a lower bound.
        counted = STEPPED if steps < record_limit(spec) else STEPPED_AT_LEAST
        findings.fail(
            "step-count",
            counted(
                at=at, count=steps, epochs=spec.epochs, batches=spec.steps, iterations=iterations
            ),
        )
    names = list(case_data(spec).parameters)
    for epoch in range(spec.epochs):
        last = (epoch + 1) * spec.steps - 1
        if last >= steps:
            findings.fail("epoch-weights-match", UNFINISHED(at=at, epoch=epoch + 1))
            break
        mine = {name: as_tensor(learner.records[last][name]) for name in names}
        expected = {name: as_tensor(reference.records[last][name]) for name in names}
        if not all(close(mine[name], expected[name]) for name in names):
            findings.fail(
                "epoch-weights-match",
                EPOCH_WEIGHTS_DIFFER(
                    at=at, epoch=epoch + 1, difference=differs(*first_difference(mine, expected))
                ),
            )
            break
    assert learner.final is not None and reference.final is not None
    _judge_losses(findings, at, spec, learner.final, reference.final, iterations)
    return findings


def _judge_losses(
    findings: CaseFindings,
    at: Said,
    spec: CaseSpec,
    final: dict[str, Any],
    reference: dict[str, Any],
    iterations: int,
) -> None:
    losses = final["losses"]
    container, _, element = final["losses_type"].partition(" of ")
    if container not in ("list", "tuple") or not isinstance(losses, list):
        findings.fail("returns-list", NOT_A_LIST(at=at, type=learner_text(final["losses_type"])))
        findings.fail("losses-match", NO_LOSSES(at=at))
        return
    if element:
        kept = TENSORS_KEPT if element == "Tensor" else NOT_FLOATS
        findings.fail("returns-list", kept(at=at, type=learner_text(element)))
    if len(losses) != iterations or any(v is None for v in losses):
        findings.fail("returns-list", LOSS_COUNT(at=at, count=len(losses), iterations=iterations))
    expected = reference["losses"]
    assert isinstance(expected, list)
    for iteration, (mine, theirs) in enumerate(zip(losses, expected, strict=False)):
        if mine is None or not within_tolerance(mine, theirs):
            findings.fail(
                "losses-match",
                LOSS_DIFFERS(at=at, iteration=iteration + 1, mine=mine, theirs=theirs),
            )
            return
    if len(losses) != len(expected):
        findings.fail(
            "losses-match", LOSSES_COUNTED(at=at, count=len(losses), expected=len(expected))
        )


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    """The loss of every iteration, the learner's against the reference loop's."""
    assert learner.final is not None and reference.final is not None
    mine, theirs = learner.final["losses"], reference.final["losses"]
    if not isinstance(mine, list) or not isinstance(theirs, list):
        return []
    return [plot_series(spec.id, "loss", mine, theirs)]


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("losses_type", ("list", "tuple")),
    judge_case=judge_case,
    plots=plots,
)

KIND = ExerciseKind(
    name="training-loop",
    summary="A whole training loop over batches and epochs that returns every iteration's loss.",
    record=record_loop,
    case_settings=frozenset({"epochs", "model", "loss"}),
    trace=TRACE,
    judge=JUDGE,
    models=stepping_models,
    replay=WHOLE_LOOP,
    sandbox_helpers=(most_loop_records,),
)
