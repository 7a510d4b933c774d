"""The `dataloader-epoch` kind: one epoch of a small MLP over a `DataLoader`,
`train_epoch(model, optimizer, loss_fn, loader) -> float`.

A case builds `nn.Sequential(Linear, ReLU, Linear)` (`harness.build_mlp`), hands it in
**evaluation mode**, with the case's optimizer over its parameters, `nn.MSELoss()`, and a
`DataLoader` over `examples` examples in batches of `batch_size`, not shuffled: the last batch
is short when `batch_size` does not divide `examples`. The function must put the model in
training mode, then zero, backward and step once per batch, and return the mean loss per
example (each batch's mean loss weighted by its size) as a Python float.

What the harness records: after each step of the case's optimizer, every parameter
(`flat_parameters`); at the end, the parameters, the returned value and its type, whether every
module is in training mode, and the forward passes through the first layer, with those made in
training mode (a hook: it picks the words of a check with no points).

The grader computes the epoch itself (`expected_parameters`), and each batch's loss at the
parameters the learner's own steps reached (`losses_along`), for the returned mean.
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
from graders.harness import (
    Record,
    build_mlp,
    build_optimizer,
    flat_parameters,
    number_of,
    type_name,
)
from graders.judging import (
    LEFT_IN_EVAL,
    NOT_FLOAT,
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    close,
    opened,
    said_times,
    then,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.quoting import learner_text
from graders.report import Diagnosis, PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import CaseTrace, TraceShape


def build_epoch_case(
    spec: dict[str, Any],
) -> tuple[nn.Sequential, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The case's MLP in evaluation mode, its optimizer, and the dataset's batches in the
    loader's order, all drawn from the case's generator (run in the sandbox too: harness names
    only)."""
    generator = torch.Generator().manual_seed(int(spec["seed"]))
    model = build_mlp(spec, generator)
    examples = int(spec.get("examples") or 0) or int(spec["steps"]) * int(spec["batch_size"])
    x = torch.randn(examples, int(spec["in_features"]), generator=generator)
    y = torch.randn(examples, int(spec["out_features"]), generator=generator)
    size = int(spec["batch_size"])
    batches = [(x[i : i + size], y[i : i + size]) for i in range(0, examples, size)]
    optimizer = build_optimizer(list(model.parameters()), spec)
    model.eval()
    return model, optimizer, batches


def record_epoch(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """One call over a DataLoader of the case's batches (run in the sandbox too: harness names
    and build_epoch_case only)."""
    model, optimizer, batches = build_epoch_case(spec)
    x = torch.cat([bx for bx, _ in batches])
    y = torch.cat([by for _, by in batches])
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=int(spec["batch_size"]), shuffle=False)
    seen = {"forwards": 0.0, "train_forwards": 0.0}

    def watch(module: Any, inputs: Any) -> None:
        seen["forwards"] += 1
        if all(m.training for m in model.modules()):
            seen["train_forwards"] += 1

    model[0].register_forward_pre_hook(watch)
    most = 4 * len(batches)

    def stepped(*_: Any) -> None:
        if len(records) < most:
            records.append({"parameters": flat_parameters(model)})

    optimizer.register_step_post_hook(stepped)
    returned = function(model, optimizer, nn.MSELoss(), loader)
    return {
        "parameters": flat_parameters(model),
        "value": number_of(returned),
        "value_type": type_name(returned),
        "training_after": float(all(m.training for m in model.modules())),
        **seen,
    }


def batch_count(spec: CaseSpec) -> int:
    examples = spec.examples or spec.steps * spec.batch_size
    return -(-examples // spec.batch_size)


def parameter_count(spec: CaseSpec) -> int:
    hidden = spec.hidden_features
    return hidden * (spec.in_features + 1) + spec.out_features * (hidden + 1)


TRACE = TraceShape(
    record_fields={"parameters": "parameters"},
    final_fields={
        "parameters": "parameters",
        "value": "number",
        "value_type": "text",
        "training_after": "number",
        "forwards": "number",
        "train_forwards": "number",
    },
    most_records=lambda spec: 4 * batch_count(spec),
    exact=False,
    parameter_count=parameter_count,
)


@functools.cache
def expected_parameters(spec: CaseSpec, cleared: bool = True) -> tuple[float, ...]:
    """The parameters after the epoch: zero, forward, backward, step on each batch, computed
    here (with `cleared` False, never zero: each step on the sum of every gradient so far)."""
    model, optimizer, batches = build_epoch_case(spec.harness_spec())
    model.train()
    for x, y in batches:
        if cleared:
            optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return tuple(flat_parameters(model))


def losses_along(spec: CaseSpec, learner: CaseTrace) -> list[tuple[float, int]] | None:
    """Each batch's mean loss and size, at the parameters the learner's steps had reached before
    it (the case's first parameters before the first), computed here; None unless the learner's
    code made exactly one step per batch."""
    model, _, batches = build_epoch_case(spec.harness_spec())
    if len(learner.records) != len(batches):
        return None
    befores = [flat_parameters(model), *(r["parameters"] for r in learner.records[:-1])]
    found = []
    with torch.no_grad():
        for before, (x, y) in zip(befores, batches, strict=True):
            nn.utils.vector_to_parameters(as_tensor(before), model.parameters())
            found.append((nn.functional.mse_loss(model(x), y).item(), len(x)))
    return found


def weighted_mean(losses: list[tuple[float, int]]) -> float:
    return sum(loss * size for loss, size in losses) / sum(size for _, size in losses)


def _said_parameter(spec: CaseSpec, index: int) -> str:
    """A flat index in the learner's terms: `model[2].weight[0][3]`."""
    model, _, _ = build_epoch_case(spec.harness_spec())
    for name, parameter in model.named_parameters():
        if index < parameter.numel():
            layer, attribute = name.split(".")
            at = torch.unravel_index(torch.tensor(index), parameter.shape)
            return f"model[{layer}].{attribute}" + "".join(f"[{int(i)}]" for i in at)
        index -= parameter.numel()
    return "a parameter"


CHECKS = {
    "runs": RAN_TO_THE_END,
    "weights-match": Sentence(
        "dataloader-epoch/passed-weights-match",
        "After the epoch every parameter equals one zero, backward, step per batch.",
    ),
    "mean-loss": Sentence(
        "dataloader-epoch/passed-mean-loss",
        "Returns the mean loss per example: each batch's loss weighted by its size.",
    ),
    "training-mode": Sentence(
        "dataloader-epoch/passed-training-mode", "The model is in training mode after the call."
    ),
    # The hook that sees the forward passes runs in the learner's process: it teaches, with no
    # points (docs/security.md).
    "forward-in-training": Sentence(
        "dataloader-epoch/passed-forward-in-training",
        "Every forward pass the harness saw ran in training mode: this check carries no points.",
    ),
    "returns-float": Sentence("dataloader-epoch/passed-returns-float", "Returns a Python float."),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first.
PARAMETER_DIFFERS = Sentence(
    "dataloader-epoch/parameter-differs",
    "{at}: after the epoch `{where}` is {yours:.6g} where {theirs:.6g} was expected.",
)
STEPPED = Sentence(
    "dataloader-epoch/stepped",
    "Your loop stepped the optimizer {count} for {batches} batches.",
)
LOSSES_UNTOLD = Sentence(
    "dataloader-epoch/losses-untold",
    "{at}: your loop stepped the optimizer {count} for {batches} batches, so the batches' losses "
    "cannot be told apart.",
)
NOTHING_NUMERIC = Sentence("dataloader-epoch/nothing-numeric", "nothing numeric")
MEAN_DIFFERS = Sentence(
    "dataloader-epoch/mean-differs",
    "{at}: you returned {shown:.6g}; the mean loss per example over your epoch is {mean:.6g} "
    "({batches} batches, the last of {last} examples).",
)
FORWARDS_IN_EVAL = Sentence(
    "dataloader-epoch/forwards-in-eval",
    "{at}: {evaluating} of the {forwards} forward passes the harness saw ran in evaluation mode.",
)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings, final, at = opened(spec, learner)
    batches = batch_count(spec)
    mine, expected = as_tensor(final["parameters"]), as_tensor(expected_parameters(spec))
    if not close(mine, expected):
        gap = (mine - expected).abs()
        index = int(gap.argmax())
        steps = len(learner.records)
        counted = STEPPED(count=said_times(steps), batches=batches) if steps != batches else None
        differing = PARAMETER_DIFFERS(
            at=at,
            where=_said_parameter(spec, index),
            yours=mine[index].item(),
            theirs=expected[index].item(),
        )
        findings.fail("weights-match", then(differing, counted))
    value, losses = final["value"], losses_along(spec, learner)
    if losses is None:
        findings.fail(
            "mean-loss",
            LOSSES_UNTOLD(at=at, count=said_times(len(learner.records)), batches=batches),
        )
    elif value is None or not within_tolerance(value, weighted_mean(losses)):
        shown: Said | float = NOTHING_NUMERIC() if value is None else value
        findings.fail(
            "mean-loss",
            MEAN_DIFFERS(
                at=at,
                shown=shown,
                mean=weighted_mean(losses),
                batches=len(losses),
                last=losses[-1][1],
            ),
        )
    if not final["training_after"]:
        findings.fail("training-mode", LEFT_IN_EVAL(at=at))
    if final["train_forwards"] != final["forwards"] or not final["forwards"]:
        findings.fail(
            "forward-in-training",
            FORWARDS_IN_EVAL(
                at=at,
                evaluating=int(final["forwards"] - final["train_forwards"]),
                forwards=int(final["forwards"]),
            ),
        )
    if final["value_type"] != "float":
        findings.fail("returns-float", NOT_FLOAT(at=at, type=learner_text(final["value_type"])))
    return findings


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


def epoch_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """The mistakes of the returned mean, each computed here from the batches' losses along the
    learner's own steps (the plain mean of the batches' losses; every batch counted as full and
    divided by the examples); a model in evaluation mode after a right epoch (its state after
    the call); parameters that are those of an epoch never cleared (computed here)."""
    means: dict[Diagnosis, bool] = {"unweighted-batch-mean": True, "last-batch-as-full": True}
    left_in_eval = accumulated = True
    for spec in exercise.cases:
        trace = traces[spec.id]
        final = trace.final
        losses = losses_along(spec, trace)
        if final is None or losses is None or final["value"] is None:
            return []
        value = final["value"]
        plain = sum(loss for loss, _ in losses) / len(losses)
        as_full = sum(loss * spec.batch_size for loss, _ in losses) / sum(n for _, n in losses)
        means["unweighted-batch-mean"] &= within_tolerance(value, plain)
        means["last-batch-as-full"] &= within_tolerance(value, as_full)
        right = close(as_tensor(final["parameters"]), as_tensor(expected_parameters(spec)))
        accumulated &= not right and close(
            as_tensor(final["parameters"]), as_tensor(expected_parameters(spec, cleared=False))
        )
        left_in_eval &= right and within_tolerance(value, weighted_mean(losses))
        left_in_eval &= not final["training_after"]
    found = [Explanation((code,), "epoch-mean") for code, fits in means.items() if fits]
    if left_in_eval:
        found.append(Explanation(("missing-train-mode",), "epoch-mode"))
    if accumulated:
        found.append(Explanation(("grads-accumulated-across-batches",), "epoch-uncleared"))
    return found


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("value_type", ("float",)),
    judge_case=judge_case,
    plots=plots,
)

_FIX = """```python
model.train()
total, count = 0.0, 0
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss.item() * len(x)
    count += len(x)
return total / count
```"""

# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="unweighted-batch-mean",
        name="Mean of the batch means",
        words=(
            "You returned the plain mean of the batches' losses. The last batch is shorter, "
            "so its examples count for more than the others': weight each batch's loss by its "
            "size (`loss.item() * len(x)`) and divide by the number of examples."
        ),
        hint=Hint(
            where="Look at how you add up the losses and what you divide by.",
            what=(
                "Each batch's loss is a mean over its own examples. When the batches differ in "
                "size, the mean of these means is not the mean over all examples."
            ),
            fix=_FIX,
            lesson="mean",
        ),
    ),
    Declared(
        code="last-batch-as-full",
        name="Last batch counted as full",
        words=(
            "You weighted every batch's loss by the loader's `batch_size`, but the last batch "
            "is shorter: weight each by its own size, `len(x)`, and divide by the number of "
            "examples."
        ),
        hint=Hint(
            where="Look at the size you multiply each batch's loss by.",
            what=(
                "`loader.batch_size` is the size of every batch but the last, which holds what "
                "is left of the dataset."
            ),
            fix=_FIX,
            lesson="mean",
        ),
    ),
    Declared(
        code="missing-train-mode",
        name="Not put in training mode",
        words=(
            "When your epoch returned, the model was in evaluation mode (the mode it is handed "
            "in with). An epoch of training runs in training mode and leaves the model "
            "in it (dropout and batch norm behave differently in each): call `model.train()` "
            "before the first batch, and no `model.eval()` after it."
        ),
        hint=Hint(
            where="Look at the first line of your epoch, before the loop.",
            what=(
                "The model may come from an evaluation (`model.eval()`): an epoch of training "
                "puts it back in training mode first."
            ),
            fix=_FIX,
            lesson="train-mode",
        ),
    ),
)

KIND = ExerciseKind(
    name="dataloader-epoch",
    summary="One epoch of a small MLP over a DataLoader: training mode, zero, backward, step per "
    "batch, and the mean loss per example.",
    record=record_epoch,
    case_settings=frozenset({"hidden_features", "examples"}),
    trace=TRACE,
    judge=JUDGE,
    models=epoch_models,
    sandbox_helpers=(build_epoch_case,),
    diagnoses=DIAGNOSES,
)
