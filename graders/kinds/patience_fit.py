"""The `patience-fit` kind: a fit that stops when validation stops improving and keeps the
best weights, `fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience)
-> list[float]`.

A case builds `nn.Sequential(Linear, ReLU, Linear)` (`harness.build_mlp`) in training mode, the
case's optimizer, `nn.MSELoss()`, `steps` training batches and two validation batches of
`batch_size` (a small, noisy training set: validation gets better, then worse), `epochs` as
`max_epochs` and `patience`. The function trains each epoch (zero, backward, step per batch),
measures the mean of the validation batches' mean losses, keeps a copy of the weights of the
epoch with the lowest validation loss so far (strictly lower improves), stops once `patience`
epochs in a row brought no improvement, loads the best weights back and returns every epoch's
validation loss.

What the harness records: after each step of the case's optimizer, every parameter; at the end,
the parameters, the returned list and its type, and whether every module is in training mode.

The grader computes, from those values: the training it should be (`trained`), each epoch's
validation loss at the parameters the learner's own last step of that epoch reached
(`val_losses_along`), where the rule stops on those losses (`stopping_epoch`), and which
epoch's weights are the best of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import (
    MAX_TYPE_NAME_CHARS,
    Record,
    build_mlp,
    build_optimizer,
    flat_parameters,
    number_of,
    type_name,
)
from graders.judging import (
    IN_CASE,
    LEFT_IN_EVAL,
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    close_numbers,
    opened,
    said_times,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.quoting import learner_text
from graders.report import Diagnosis, PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import CaseTrace, TraceShape


def build_fit_case(
    spec: dict[str, Any],
) -> tuple[
    nn.Sequential, list[tuple[torch.Tensor, torch.Tensor]], list[tuple[torch.Tensor, torch.Tensor]]
]:
    """The case's MLP in training mode, its training batches and its validation batches, all
    drawn from the case's generator (run in the sandbox too: harness names only)."""
    generator = torch.Generator().manual_seed(int(spec["seed"]))
    model = build_mlp(spec, generator)
    in_features, out_features = int(spec["in_features"]), int(spec["out_features"])
    size = int(spec["batch_size"])
    true_weight = torch.randn(out_features, in_features, generator=generator)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, in_features, generator=generator)
        noise = torch.randn(size, out_features, generator=generator)
        return x, 0.3 * x @ true_weight.T + noise

    train = [batch() for _ in range(int(spec["steps"]))]
    validation = [batch() for _ in range(2)]
    model.train()
    return model, train, validation


def record_fit(function: Callable[..., Any], spec: dict[str, Any], records: list[Record]) -> Record:
    """One call of the fit; every parameter after each optimizer step, and at the end (run in
    the sandbox too: harness names and build_fit_case only)."""
    model, train, validation = build_fit_case(spec)
    optimizer = build_optimizer(list(model.parameters()), spec)
    most = 4 * int(spec["epochs"]) * int(spec["steps"])

    def stepped(*_: Any) -> None:
        if len(records) < most:
            records.append({"parameters": flat_parameters(model)})

    optimizer.register_step_post_hook(stepped)
    returned = function(
        model,
        optimizer,
        nn.MSELoss(),
        [(x.clone(), y.clone()) for x, y in train],
        [(x.clone(), y.clone()) for x, y in validation],
        int(spec["epochs"]),
        int(spec.get("patience", 1)),  # CaseSpec.patience's default: sent only when set
    )
    losses, losses_type = None, type_name(returned)
    if isinstance(returned, list | tuple):
        losses = [number_of(v) for v in returned[: int(spec["epochs"]) + 1]]
        odd = [type_name(v) for v in returned if not isinstance(v, float)]
        if odd:
            losses_type = f"{losses_type} of {odd[0]}"[:MAX_TYPE_NAME_CHARS]
    return {
        "parameters": flat_parameters(model),
        "losses": losses,
        "losses_type": losses_type,
        "training_after": float(all(m.training for m in model.modules())),
    }


def most_steps(spec: CaseSpec) -> int:
    return 4 * spec.epochs * spec.steps


def parameter_count(spec: CaseSpec) -> int:
    hidden = spec.hidden_features
    return hidden * (spec.in_features + 1) + spec.out_features * (hidden + 1)


TRACE = TraceShape(
    record_fields={"parameters": "parameters"},
    final_fields={
        "parameters": "parameters",
        "losses": "numbers",
        "losses_type": "text",
        "training_after": "number",
    },
    most_records=most_steps,
    exact=False,
    parameter_count=parameter_count,
)


@functools.cache
def trained(spec: CaseSpec, cleared: bool = True) -> tuple[tuple[float, ...], ...]:
    """The parameters after each step of `epochs` epochs of zero, backward, step per batch,
    computed here (with `cleared` False, never zero: each step on every gradient so far)."""
    model, train, _ = build_fit_case(spec.harness_spec())
    optimizer = build_optimizer(list(model.parameters()), spec.harness_spec())
    found = []
    for _ in range(spec.epochs):
        for x, y in train:
            if cleared:
                optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            found.append(tuple(flat_parameters(model)))
    return tuple(found)


def val_losses_along(spec: CaseSpec, learner: CaseTrace) -> list[float]:
    """The validation loss (the mean of the batches' mean losses) after each whole epoch the
    learner's steps made, at the parameters of its last step, computed here."""
    model, _, validation = build_fit_case(spec.harness_spec())
    ends = [learner.records[end - 1]["parameters"] for end in _epoch_ends(spec, learner)]
    found = []
    with torch.no_grad():
        for parameters in ends:
            nn.utils.vector_to_parameters(as_tensor(parameters), model.parameters())
            losses = [nn.functional.mse_loss(model(x), y).item() for x, y in validation]
            found.append(sum(losses) / len(losses))
    return found


def _epoch_ends(spec: CaseSpec, learner: CaseTrace) -> range:
    return range(spec.steps, len(learner.records) + 1, spec.steps)


def stopping_epoch(
    losses: Sequence[float], patience: int, consecutive: bool = True, against_last: bool = False
) -> int | None:
    """The epoch (from 1) at which the rule stops on these losses: the count of epochs without
    a strictly lower loss than the best so far reaches `patience` (in a row, or, with
    `consecutive` False, in all); None when it does not within them. With `against_last`, an
    epoch improves when its loss is below the epoch before's (not the best's)."""
    best, without = float("inf"), 0
    for epoch, loss in enumerate(losses, start=1):
        if loss < (losses[epoch - 2] if against_last and epoch > 1 else best):
            best = min(best, loss)
            if consecutive:
                without = 0
        else:
            without += 1
            if without >= patience:
                return epoch
    return None


def best_epoch(losses: Sequence[float]) -> int:
    """The epoch (from 1) of the lowest loss, the first of equal ones."""
    return min(range(len(losses)), key=lambda i: (losses[i], i)) + 1


def last_lower_epoch(losses: Sequence[float]) -> int:
    """The last epoch (from 1) whose loss is below the epoch before's (the first: 1): the weights
    a fit keeps that compares each epoch with the one before it."""
    return max(
        (epoch for epoch in range(2, len(losses) + 1) if losses[epoch - 1] < losses[epoch - 2]),
        default=1,
    )


CHECKS = {
    "runs": RAN_TO_THE_END,
    "weights-match": Sentence(
        "patience-fit/passed-weights-match",
        "Each epoch trained with one zero, backward, step per batch.",
    ),
    "val-losses": Sentence(
        "patience-fit/passed-val-losses",
        "Returns one validation loss per epoch, the mean of the validation batches' losses.",
    ),
    "stops-on-time": Sentence(
        "patience-fit/passed-stops-on-time",
        "Stops at the first epoch that makes `patience` epochs in a row without improvement (or "
        "after `max_epochs`).",
    ),
    "best-restored": Sentence(
        "patience-fit/passed-best-restored",
        "The model ends with the weights of the epoch with the lowest validation loss.",
    ),
    "training-mode": Sentence(
        "patience-fit/passed-training-mode", "The model is in training mode after the fit."
    ),
    "returns-list": Sentence("patience-fit/passed-returns-list", "Returns a list of floats."),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first.
STEP_DIFFERS = Sentence(
    "patience-fit/step-differs",
    "{at}: after batch {batch} of epoch {epoch}, the parameters are not those of one zero, "
    "backward, step per batch.",
)
TOO_MANY_STEPS = Sentence(
    "patience-fit/too-many-steps",
    "{at}: your fit stepped the optimizer {steps} times; {epochs} epochs of {batches} batches "
    "make {most} steps at most.",
)
NOT_WHOLE_EPOCHS = Sentence(
    "patience-fit/not-whole-epochs",
    "{at}: your fit stepped the optimizer {count}: not whole epochs of {batches} batches.",
)
NO_LIST = Sentence(
    "patience-fit/no-list", "{at}: your fit trained {epochs} epochs and returned no list."
)
LIST_LENGTH = Sentence(
    "patience-fit/list-length",
    "{at}: your fit trained {epochs} epochs and returned {count} losses.",
)
VAL_DIFFERS = Sentence(
    "patience-fit/val-differs",
    "{at}: for epoch {epoch} you returned {yours:.6g}; the validation loss at the weights your "
    "epoch reached is {theirs:.6g}.",
)
VAL_MISSING = Sentence(
    "patience-fit/val-missing",
    "{at}: for epoch {epoch} you returned nothing numeric; the validation loss at the weights "
    "your epoch reached is {theirs:.6g}.",
)
WENT_ON = Sentence(
    "patience-fit/went-on",
    "{at}: epoch {stop} made {patience} epochs in a row without improvement (patience "
    "{patience}), but your fit went on to epoch {epochs}.",
)
STOPPED_EARLY = Sentence(
    "patience-fit/stopped-early",
    "{at}: your fit stopped after epoch {epochs}, before `patience` ({patience}) epochs in a "
    "row brought no improvement.",
)
NO_EPOCH = Sentence("patience-fit/no-epoch", "{at}: your fit made no whole epoch.")
NOT_BEST = Sentence(
    "patience-fit/not-best",
    "{at}: epoch {best} had the lowest validation loss ({lowest:.6g}; the last, epoch {epochs}, "
    "{last:.6g}), but the model does not end with its weights.",
)
NOT_LIST = Sentence(
    "patience-fit/not-list",
    "{at}: your fit returned a {type}; return a list of floats (`.item()` of each loss).",
)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings, final, at = opened(spec, learner)
    steps = len(learner.records)
    right = trained(spec)
    for index, record in enumerate(learner.records[: len(right)]):
        if not close_numbers(record["parameters"], right[index]):
            epoch, batch = divmod(index, spec.steps)
            findings.fail("weights-match", STEP_DIFFERS(at=at, batch=batch + 1, epoch=epoch + 1))
            break
    if steps > len(right):
        findings.fail(
            "weights-match",
            TOO_MANY_STEPS(
                at=at, steps=steps, epochs=spec.epochs, batches=spec.steps, most=len(right)
            ),
        )
    along = val_losses_along(spec, learner)
    epochs = len(along)
    losses = final["losses"]
    if steps % spec.steps or not epochs:
        findings.fail(
            "val-losses", NOT_WHOLE_EPOCHS(at=at, count=said_times(steps), batches=spec.steps)
        )
    elif not isinstance(losses, list):
        findings.fail("val-losses", NO_LIST(at=at, epochs=epochs))
    elif len(losses) != epochs:
        findings.fail("val-losses", LIST_LENGTH(at=at, epochs=epochs, count=len(losses)))
    else:
        for epoch, (mine, expected) in enumerate(zip(losses, along, strict=True), start=1):
            if mine is None:
                findings.fail("val-losses", VAL_MISSING(at=at, epoch=epoch, theirs=expected))
                break
            if not within_tolerance(mine, expected):
                findings.fail(
                    "val-losses", VAL_DIFFERS(at=at, epoch=epoch, yours=mine, theirs=expected)
                )
                break
    if epochs:
        stop = stopping_epoch(along, spec.patience)
        if stop is not None and stop < epochs:
            findings.fail(
                "stops-on-time",
                WENT_ON(at=at, stop=stop, patience=spec.patience, epochs=epochs),
            )
        elif stop is None and epochs < spec.epochs:
            findings.fail(
                "stops-on-time", STOPPED_EARLY(at=at, epochs=epochs, patience=spec.patience)
            )
        best = best_epoch(along)
        kept = learner.records[best * spec.steps - 1]["parameters"]
        if not close_numbers(final["parameters"], kept):
            findings.fail(
                "best-restored",
                NOT_BEST(at=at, best=best, lowest=along[best - 1], epochs=epochs, last=along[-1]),
            )
    else:
        findings.fail("stops-on-time", NO_EPOCH(at=at))
        findings.fail("best-restored", NO_EPOCH(at=at))
    if not final["training_after"]:
        findings.fail("training-mode", LEFT_IN_EVAL(at=at))
    if final["losses_type"] not in ("list", "tuple"):
        findings.fail("returns-list", NOT_LIST(at=at, type=learner_text(final["losses_type"])))
    return findings


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


def _accumulated(spec: CaseSpec, trace: CaseTrace) -> bool:
    """Are the learner's steps those of a training never cleared (and not the right one)?"""
    uncleared = trained(spec, cleared=False)
    return (
        0 < len(trace.records) <= len(uncleared)
        and all(
            close_numbers(record["parameters"], values)
            for record, values in zip(trace.records, uncleared, strict=False)
        )
        and not all(
            close_numbers(record["parameters"], values)
            for record, values in zip(trace.records, trained(spec), strict=False)
        )
    )


def stopping_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """The mistakes of early stopping, each decided from the validation losses computed here
    along the learner's own steps, with the training and the returned losses right: the last
    weights kept where an earlier epoch was best; a stop one epoch off the rule's; a count of
    epochs without improvement never reset; each epoch compared with the one before, not with
    the best. And steps that are those of a training never cleared (computed here)."""
    if all(_accumulated(spec, traces[spec.id]) for spec in exercise.cases):
        return [Explanation(("grads-accumulated-across-batches",), "fit-uncleared")]
    fits: dict[Diagnosis, bool] = dict.fromkeys(
        (
            "best-weights-not-kept",
            "patience-off-by-one",
            "patience-not-reset",
            "improvement-against-last-epoch",
        ),
        True,
    )
    shown: dict[Diagnosis, bool] = dict.fromkeys(fits, False)
    for spec in exercise.cases:
        trace = traces[spec.id]
        final = trace.final
        right = trained(spec)
        steps = len(trace.records)
        if final is None or steps % spec.steps or steps > len(right):
            return []
        if not all(
            close_numbers(r["parameters"], w) for r, w in zip(trace.records, right, strict=False)
        ):
            return []
        along = val_losses_along(spec, trace)
        losses = final["losses"]
        if not along or not isinstance(losses, list) or len(losses) != len(along):
            return []
        if not all(
            m is not None and within_tolerance(m, e) for m, e in zip(losses, along, strict=True)
        ):
            return []
        epochs = len(along)
        kept = trace.records[best_epoch(along) * spec.steps - 1]["parameters"]
        ends_best = close_numbers(final["parameters"], kept)
        ends_last = close_numbers(final["parameters"], trace.records[-1]["parameters"])
        on_time = (stopping_epoch(along, spec.patience) or spec.epochs) == epochs
        # One epoch late: the rule stopped at the one before; one early: one more would have.
        late = stopping_epoch(along, spec.patience) == epochs - 1
        early = epochs < spec.epochs and stopping_epoch(along, spec.patience - 1 or 1) == epochs
        in_all = (stopping_epoch(along, spec.patience, consecutive=False) or spec.epochs) == epochs
        fits["best-weights-not-kept"] &= on_time and ends_last
        shown["best-weights-not-kept"] |= not ends_best
        fits["patience-off-by-one"] &= ends_best and (on_time or late or early)
        shown["patience-off-by-one"] |= not on_time
        fits["patience-not-reset"] &= ends_best and in_all
        shown["patience-not-reset"] |= not on_time
        # Each epoch compared with the one before, not the best: it stops and keeps weights
        # by that rule (computed here on the losses along the learner's steps).
        kept_last = trace.records[last_lower_epoch(along) * spec.steps - 1]["parameters"]
        by_last = stopping_epoch(along, spec.patience, against_last=True) or spec.epochs
        fits["improvement-against-last-epoch"] &= by_last == epochs and close_numbers(
            final["parameters"], kept_last
        )
        shown["improvement-against-last-epoch"] |= not (on_time and ends_best)
    return [
        Explanation((code,), "patience-fit", _against_last_note(exercise, traces))
        if code == "improvement-against-last-epoch"
        else Explanation((code,), "patience-fit")
        for code in fits
        if fits[code] and shown[code]
    ]


LOWER_THAN_LAST = Sentence(
    "patience-fit/lower-than-last",
    "In {case}, epoch {epoch}'s validation loss, {loss:.6g}, is below epoch {previous}'s "
    "({before:.6g}) but not below the lowest so far, epoch {best}'s ({lowest:.6g}): it is no "
    "improvement.",
)


def _against_last_note(exercise: Exercise, traces: Traces) -> Said | None:
    """The first epoch, in the cases given, lower than the one before but not the best so far:
    where comparing with the last epoch and with the best part."""
    for spec in exercise.cases:
        along = val_losses_along(spec, traces[spec.id])
        for epoch in range(2, len(along) + 1):
            loss, before = along[epoch - 1], along[epoch - 2]
            best = best_epoch(along[: epoch - 1])
            if before > loss >= along[best - 1]:
                return LOWER_THAN_LAST(
                    case=IN_CASE(case=spec.id),
                    epoch=epoch,
                    loss=loss,
                    previous=epoch - 1,
                    before=before,
                    best=best,
                    lowest=along[best - 1],
                )
    return None


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("losses_type", ("list", "tuple")),
    judge_case=judge_case,
    plots=plots,
)

_FIX = """```python
best_loss, best_state, best_epoch = float("inf"), None, 0
for epoch in range(max_epochs):
    ...  # train, then measure val_loss
    losses.append(val_loss)
    if val_loss < best_loss:
        best_loss, best_epoch = val_loss, len(losses)
        best_state = copy.deepcopy(model.state_dict())
    elif len(losses) - best_epoch >= patience:
        break
model.load_state_dict(best_state)
```"""

# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="best-weights-not-kept",
        name="Last weights, not the best",
        words=(
            "After your fit the model holds the last epoch's weights, not those of the epoch "
            "with the lowest validation loss. Either the best weights were never loaded back, "
            "or what was kept is `model.state_dict()` itself, whose tensors are the model's own "
            "and go on training: keep `copy.deepcopy(model.state_dict())` and load it at the "
            "end."
        ),
        hint=Hint(
            where="Look at how you keep the best epoch's weights, and what you load at the end.",
            what=(
                "`model.state_dict()` returns the model's own tensors, not a copy: kept as it "
                "is, it changes with every later step."
            ),
            fix=_FIX,
            lesson="best",
        ),
    ),
    Declared(
        code="patience-off-by-one",
        name="Patience off by one",
        words=(
            "Your fit stops one epoch away from where the rule stops: it should stop at the "
            "first epoch that makes `patience` epochs in a row without improvement, that "
            "epoch's loss included in the list."
        ),
        hint=Hint(
            where="Look at the comparison of your count of epochs without improvement with "
            "`patience`, and where in the epoch you make it.",
            what=(
                "With patience p, the fit stops right after the p-th epoch in a row without "
                "improvement: `>=` after counting that epoch, not `>`."
            ),
            fix=_FIX,
            lesson="patience",
        ),
    ),
    Declared(
        code="improvement-against-last-epoch",
        name="Compared with the last epoch, not the best",
        words=(
            "Your fit counts an epoch as an improvement when its validation loss is below the "
            "epoch before's, not below the lowest so far: where it stops and which epoch's "
            "weights it ends with are those of that rule. An epoch improves only when its loss "
            "is below the best so far (`val_loss < best_loss`), and only then are its weights "
            "kept and the count of epochs without improvement reset."
        ),
        hint=Hint(
            where="Look at what you compare each epoch's validation loss with.",
            what=(
                "After a bad epoch, the next one can be lower than it and still worse than the "
                "best: that is no improvement."
            ),
            fix=_FIX,
            lesson="patience",
        ),
    ),
    Declared(
        code="patience-not-reset",
        name="Patience count never reset",
        words=(
            "Your fit counts every epoch without improvement since the start: the count must "
            "go back to zero when an epoch improves, so that only epochs in a row stop it."
        ),
        hint=Hint(
            where="Look at what happens to your count of epochs without improvement when an "
            "epoch improves.",
            what="Patience counts epochs in a row without improvement: an improvement resets it.",
            fix=_FIX,
            lesson="patience",
        ),
    ),
)

KIND = ExerciseKind(
    name="patience-fit",
    summary="A fit over epochs that stops when validation stops improving, keeps a copy of the "
    "best weights and loads them back.",
    record=record_fit,
    case_settings=frozenset({"epochs", "patience", "hidden_features"}),
    trace=TRACE,
    judge=JUDGE,
    models=stopping_models,
    sandbox_helpers=(build_fit_case,),
    diagnoses=DIAGNOSES,
)
