"""The `epoch-loop` kind: a loop over epochs with a learning-rate scheduler,
`train(model, optimizer, scheduler, loss_fn, batches, epochs)`, returning each epoch's mean loss.

One kind, one module (graders/kinds): its recorder, its judge and its models stay together.

The scheduler is `StepLR(optimizer, lr_step_size, lr_gamma)`: it must step once per epoch,
after the epoch's optimizer steps. The harness records, at every optimizer step, the learning
rate it read and how many scheduler steps came before it, then every parameter after it
(flattened: the case may declare its model, docs/authoring.md). The checks
read each step's learning rate from the weights' update (`applied_steps`), never from those
readings, which the code could change (a scheduler of the learner's own making steps no given
scheduler and is right). The grader replays the loop itself (`replay_epochs`), outside the
sandbox: the reference is the replay with one scheduler step after each epoch, and a learner
whose numbers equal the replay of their own scheduler counts is told what their counts say.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import (
    CallRecorder,
    Record,
    build_case,
    flat_parameters,
    number_of,
    type_name,
)
from graders.judging import (
    RAN_TO_THE_END,
    CaseFindings,
    KindJudge,
    as_tensor,
    case_data,
    close,
    close_numbers,
    differs,
    first_difference,
    flat_parameter_count,
    loss_and_gradients,
    plot_series,
    unflattened,
    within_tolerance,
)
from graders.kind import ExerciseKind
from graders.optimizers import declared_optimizer
from graders.quoting import learner_text
from graders.report import Diagnosis, PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import CaseTrace, TraceShape


def most_epoch_records(spec: dict[str, Any]) -> int:
    """The most optimizer steps a case records: four times a right loop's, bounded whatever
    the learner's loop does."""
    return 4 * int(spec["epochs"]) * int(spec["steps"])


def record_epochs(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """One call that trains for several epochs with a StepLR scheduler; at every optimizer step
    its learning rate and the scheduler steps before it, then the weights (run in the sandbox
    too: harness names and most_epoch_records only)."""
    case = build_case(spec)
    optimizer = case.optimizer
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=int(spec["lr_step_size"]), gamma=float(spec["lr_gamma"])
    )
    most = most_epoch_records(spec)
    seen = {"scheduler_steps": 0, "before": 0, "lr": 0.0}
    scheduler_step = scheduler.step

    def counted_step(*args: Any, **kwargs: Any) -> Any:
        seen["scheduler_steps"] += 1
        return scheduler_step(*args, **kwargs)

    # Per instance, as CallRecorder does: torch itself is never patched.
    scheduler.step = counted_step  # type: ignore[method-assign]

    def before_step(*_: Any) -> None:
        seen["lr"] = float(optimizer.param_groups[0]["lr"])
        seen["before"] = seen["scheduler_steps"]

    def after_step() -> None:
        if len(records) < most:
            records.append(
                {
                    "parameters": flat_parameters(case.model),
                    "lr": seen["lr"],
                    "scheduler_steps": float(seen["before"]),
                    "calls": recorder.take(),
                }
            )

    optimizer.register_step_pre_hook(before_step)
    recorder = CallRecorder(case, on_step=after_step)
    batches = [(x.clone(), y.clone()) for x, y in case.inputs]
    returned = function(
        case.model, optimizer, scheduler, case.loss_fn, batches, int(spec["epochs"])
    )
    losses = [number_of(v) for v in returned[:most]] if isinstance(returned, list | tuple) else None
    return {
        "parameters": flat_parameters(case.model),
        "losses": losses,
        "losses_type": type_name(returned),
        "scheduler_steps": float(seen["scheduler_steps"]),
        "calls": recorder.take(),
    }


def record_limit(spec: CaseSpec) -> int:
    return most_epoch_records(spec.harness_spec())


TRACE = TraceShape(
    record_fields={
        "parameters": "parameters",
        "lr": "number",
        "scheduler_steps": "number",
        "calls": "calls",
    },
    final_fields={
        "parameters": "parameters",
        "losses": "numbers",
        "losses_type": "text",
        "scheduler_steps": "number",
        "calls": "calls",
    },
    most_records=record_limit,
    exact=False,
    parameter_count=flat_parameter_count,
)


class Replayed:
    """The grader's own run of a loop: the learning rate of every step, the parameters after
    it (flattened, as recorded), and each epoch's mean loss (the losses read before each
    step)."""

    def __init__(self, lrs: list[float], weights: list[torch.Tensor], means: list[float]) -> None:
        self.lrs = lrs
        self.weights = weights
        self.means = means


def schedule_lr(spec: CaseSpec, scheduler_steps: int) -> float:
    """StepLR's learning rate after so many scheduler steps."""
    return spec.lr * spec.lr_gamma ** (scheduler_steps // spec.lr_step_size)


def replay_epochs(spec: CaseSpec, counts: Sequence[int]) -> Replayed:
    """Train as the case does, step `i` after `counts[i]` scheduler steps, here and trusted.

    One optimizer step per batch, epoch after epoch, for as many steps as `counts` has. The
    learning rate is set from StepLR's formula: SGD's momentum buffer does not depend on it.
    """
    case = build_case(spec.harness_spec())
    model, optimizer, group = case.model, case.optimizer, case.optimizer.param_groups[0]
    lrs, weights, losses = [], [], []
    for index, count in enumerate(counts):
        x, y = case.inputs[index % spec.steps]
        group["lr"] = schedule_lr(spec, count)
        optimizer.zero_grad()
        loss = case.loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        lrs.append(float(group["lr"]))
        weights.append(torch.tensor(flat_parameters(model)))
        losses.append(loss.item())
    means = [
        sum(losses[start : start + spec.steps]) / spec.steps
        for start in range(0, len(losses) - spec.steps + 1, spec.steps)
    ]
    return Replayed(lrs, weights, means)


def right_counts(spec: CaseSpec) -> list[int]:
    """A right loop's scheduler steps before each optimizer step: one per finished epoch."""
    return [index // spec.steps for index in range(spec.epochs * spec.steps)]


@functools.cache
def expected(spec: CaseSpec) -> Replayed:
    """The reference, computed here: one scheduler step after every epoch."""
    return replay_epochs(spec, right_counts(spec))


CHECKS = {
    "runs": RAN_TO_THE_END,
    "step-count": Sentence(
        "epoch-loop/passed-step-count",
        "The optimizer steps once per batch, every epoch.",
    ),
    "scheduler-steps": Sentence(
        "epoch-loop/passed-scheduler-steps",
        "The learning rate your steps applied changes only between epochs, where the schedule "
        "changes it.",
    ),
    "learning-rates": Sentence(
        "epoch-loop/passed-learning-rates",
        "Every optimizer step moved the weights by a step at the learning rate the schedule "
        "gives its epoch.",
    ),
    "epoch-weights-match": Sentence(
        "epoch-loop/passed-epoch-weights",
        "After every epoch the weights equal the reference loop's.",
    ),
    "losses-match": Sentence(
        "epoch-loop/passed-losses",
        "The returned mean losses equal the reference loop's, epoch by epoch.",
    ),
    "returns-list": Sentence(
        "epoch-loop/passed-returns-list",
        "Returns a list with one float, the mean loss, per epoch.",
    ),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first.
AT_CASE = Sentence("epoch-loop/at-case", "In {case}")
STEPPED = Sentence(
    "epoch-loop/stepped",
    "{at}: your loop stepped the optimizer {count} times; {epochs} epochs of {batches} batches "
    "step {iterations} times.",
)
STEPPED_AT_LEAST = Sentence(
    "epoch-loop/stepped-at-least",
    "{at}: your loop stepped the optimizer at least {count} times; {epochs} epochs of {batches} "
    "batches step {iterations} times.",
)
NEVER_MOVED = Sentence(
    "epoch-loop/never-moved",
    "{at}: the weights never moved from where they started, so no optimizer step used a "
    "learning rate.",
)
NO_RATE_READ = Sentence(
    "epoch-loop/no-rate-read",
    "{at}: no update of your loop is a step of {optimizer} on its batch's gradient from your "
    "weights before it, at any learning rate, so no rate can be read from the weights.",
)
RATE_DIFFERS = Sentence(
    "epoch-loop/rate-differs",
    "{at}: optimizer step {step} (epoch {epoch}) moved the weights by a step at a learning rate "
    "of {rate:.4g}; the schedule gives epoch {epoch} {theirs:.4g}.",
)
FIRST_RATE_DIFFERS = Sentence(
    "epoch-loop/first-rate-differs",
    "{at}: optimizer step 1 moved the weights by a step at a learning rate of {rate:.4g}; the "
    "schedule's first rate is {theirs:.4g}.",
)
RATE_TIMING = Sentence(
    "epoch-loop/rate-timing",
    "{at}: between optimizer steps {step} and {next_step} ({where}) the learning rate your steps "
    "applied {mine}; {theirs}.",
)
IN_EPOCH = Sentence("epoch-loop/in-epoch", "epoch {epoch}")
ACROSS_EPOCHS = Sentence("epoch-loop/across-epochs", "epochs {first} and {second}")
RATE_WENT = Sentence("epoch-loop/rate-went", "went from {earlier:.4g} to {later:.4g}")
RATE_STAYED = Sentence("epoch-loop/rate-stayed", "stayed at {rate:.4g}")
SCHEDULE_CHANGES = Sentence(
    "epoch-loop/schedule-changes",
    "the schedule changes it there, from {earlier:.4g} to {later:.4g}",
)
SCHEDULE_KEEPS = Sentence("epoch-loop/schedule-keeps", "the schedule keeps it at {rate:.4g} there")
UNFINISHED = Sentence("epoch-loop/unfinished", "{at}: epoch {epoch} never finished its steps.")
EPOCH_WEIGHTS_DIFFER = Sentence(
    "epoch-loop/epoch-weights-differ",
    "{at}: after epoch {epoch} your weights differ from the reference loop's: {difference}.",
)
NOT_A_LIST = Sentence(
    "epoch-loop/not-a-list",
    "{at}: your loop returned a {type}; return a list of floats, one per epoch.",
)
NO_LOSSES = Sentence("epoch-loop/no-losses", "{at}: no list of losses to compare.")
LOSS_COUNT = Sentence(
    "epoch-loop/loss-count",
    "{at}: your loop returned {count} values; {epochs} epochs need {epochs} float mean losses.",
)
LOSS_DIFFERS = Sentence(
    "epoch-loop/loss-differs",
    "{at}: the mean loss of epoch {epoch} differs: you returned {mine:.6g}, the reference "
    "{theirs:.6g} (the mean of the epoch's batch losses, each read before its step).",
)
LOSSES_COUNTED = Sentence(
    "epoch-loop/losses-counted",
    "{at}: {count} losses instead of {expected}.",
)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    at = AT_CASE(case=findings.case())
    right = expected(spec)
    iterations = spec.epochs * spec.steps
    records = learner.records
    if len(records) != iterations:
        counted = STEPPED if len(records) < record_limit(spec) else STEPPED_AT_LEAST
        findings.fail(
            "step-count",
            counted(
                at=at,
                count=len(records),
                epochs=spec.epochs,
                batches=spec.steps,
                iterations=iterations,
            ),
        )
    assert learner.final is not None
    start = [value for p in case_data(spec).parameters.values() for value in p.flatten().tolist()]
    if all(close_numbers(record["parameters"], start) for record in records):
        # A rate the optimizer never applied earns nothing (scheduler.step() where
        # optimizer.step() belongs steps the rates, and the weights never move).
        for check in ("learning-rates", "scheduler-steps"):
            findings.fail(check, NEVER_MOVED(at=at))
    else:
        steps = applied_steps(spec, records[:iterations])
        _judge_rates(findings, at, spec, steps, right.lrs)
        _judge_schedule(findings, at, spec, steps, right.lrs)
    for epoch in range(spec.epochs):
        last = (epoch + 1) * spec.steps - 1
        if last >= len(records):
            findings.fail("epoch-weights-match", UNFINISHED(at=at, epoch=epoch + 1))
            break
        mine = as_tensor(records[last]["parameters"])
        if not close(mine, right.weights[last]):
            difference = first_difference(
                unflattened(spec, mine), unflattened(spec, right.weights[last])
            )
            findings.fail(
                "epoch-weights-match",
                EPOCH_WEIGHTS_DIFFER(at=at, epoch=epoch + 1, difference=differs(*difference)),
            )
            break
    _judge_losses(findings, at, spec, learner.final, right.means)
    return findings


class AppliedStep:
    """One optimizer step of the learner's, as its update shows it: the update from their weights
    before the step, and the declared optimizer's update at a learning rate of 1 from there, on
    that batch's gradient (computed here). `rate` is the learning rate that turns the second
    into the first, None when no rate does (the update is no step on that gradient)."""

    def __init__(self, before: torch.Tensor, after: torch.Tensor, unit: torch.Tensor) -> None:
        self.before, self.after, self.unit = before, after, unit
        moved, direction = after - before, unit - before
        rate = float(moved @ direction / (direction @ direction)) if direction.any() else None
        self.rate = rate if rate is not None and self.took(rate) else None

    def took(self, lr: float) -> bool:
        """Is the update one step at this learning rate?"""
        return close(self.after, self.before + lr * (self.unit - self.before))


def applied_steps(spec: CaseSpec, records: Sequence[Record]) -> list[AppliedStep]:
    """Each recorded optimizer step, read from the weights (invariant 9: the learning rate the
    harness read from the optimizer before the step is the code's to change; the weights'
    update is what the rate did).

    The declared optimizer runs here at a rate of 1 from the learner's weights before each step,
    on the gradient at those weights: its state (SGD's momentum, Adam's averages) depends on
    the gradients alone, never on the rate, so any rate scales its update and nothing else.
    """
    data = case_data(spec)
    parameters = {name: value.clone() for name, value in data.parameters.items()}
    probe = {name: value.clone() for name, value in parameters.items()}
    optimizer = declared_optimizer(spec, list(probe.values()))
    for group in optimizer.param_groups:
        group["lr"] = 1.0
    steps = []
    for index, record in enumerate(records):
        x, y = data.inputs[index % spec.steps]
        gradients = loss_and_gradients(spec, parameters, x, y)[1]
        with torch.no_grad():
            for name, held in probe.items():
                held.copy_(parameters[name])
        for name, held in probe.items():
            held.grad = gradients[name]
        optimizer.step()
        new = unflattened(spec, record["parameters"])
        steps.append(
            AppliedStep(
                _flat(parameters),
                _flat(new),
                _flat({name: held.detach() for name, held in probe.items()}),
            )
        )
        parameters = new
    return steps


def _flat(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([tensor.flatten() for tensor in tensors.values()])


def _judge_rates(
    findings: CaseFindings,
    at: Said,
    spec: CaseSpec,
    steps: list[AppliedStep],
    rates: list[float],
) -> None:
    """Every step whose update is a step on its batch's gradient took the schedule's rate for
    its epoch; a step that is no such step at any rate is the weights' check, not this one,
    unless no step at all is one."""
    if not any(step.rate is not None for step in steps):
        for check in ("learning-rates", "scheduler-steps"):
            findings.fail(check, NO_RATE_READ(at=at, optimizer=spec.describe_optimizer()))
        return
    for index, (step, lr) in enumerate(zip(steps, rates, strict=False)):
        if step.rate is not None and not step.took(lr):
            epoch = index // spec.steps + 1
            findings.fail(
                "learning-rates",
                RATE_DIFFERS(at=at, step=index + 1, epoch=epoch, rate=step.rate, theirs=lr),
            )
            return


def _same_rate(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-2 * max(abs(a), abs(b)) + 1e-12


def _judge_schedule(
    findings: CaseFindings,
    at: Said,
    spec: CaseSpec,
    steps: list[AppliedStep],
    rates: list[float],
) -> None:
    """When the rate changes, read from the weights: the first epoch at the schedule's first
    rate, and a change between two steps exactly where StepLR stepped once after each epoch
    makes one. The rates' values are learning-rates'; this is their timing."""
    first = steps[0].rate if steps else None
    if first is not None and not steps[0].took(rates[0]):
        findings.fail("scheduler-steps", FIRST_RATE_DIFFERS(at=at, rate=first, theirs=rates[0]))
        return
    for index in range(1, min(len(steps), len(rates))):
        earlier, later = steps[index - 1].rate, steps[index].rate
        if earlier is None or later is None:
            continue
        changed, due = not _same_rate(earlier, later), rates[index - 1] != rates[index]
        if changed != due:
            epochs = (index - 1) // spec.steps + 1, index // spec.steps + 1
            where = (
                IN_EPOCH(epoch=epochs[0])
                if epochs[0] == epochs[1]
                else ACROSS_EPOCHS(first=epochs[0], second=epochs[1])
            )
            mine = RATE_WENT(earlier=earlier, later=later) if changed else RATE_STAYED(rate=later)
            theirs = (
                SCHEDULE_CHANGES(earlier=rates[index - 1], later=rates[index])
                if due
                else SCHEDULE_KEEPS(rate=rates[index])
            )
            findings.fail(
                "scheduler-steps",
                RATE_TIMING(
                    at=at, step=index, next_step=index + 1, where=where, mine=mine, theirs=theirs
                ),
            )
            return


def _judge_losses(
    findings: CaseFindings, at: Said, spec: CaseSpec, final: dict[str, Any], means: list[float]
) -> None:
    losses = final["losses"]
    if final["losses_type"] not in ("list", "tuple") or not isinstance(losses, list):
        findings.fail("returns-list", NOT_A_LIST(at=at, type=learner_text(final["losses_type"])))
        findings.fail("losses-match", NO_LOSSES(at=at))
        return
    if len(losses) != spec.epochs or any(v is None for v in losses):
        findings.fail("returns-list", LOSS_COUNT(at=at, count=len(losses), epochs=spec.epochs))
    for epoch, (mine, theirs) in enumerate(zip(losses, means, strict=False)):
        if mine is None or not within_tolerance(mine, theirs):
            findings.fail(
                "losses-match", LOSS_DIFFERS(at=at, epoch=epoch + 1, mine=mine, theirs=theirs)
            )
            return
    if len(losses) != len(means):
        findings.fail("losses-match", LOSSES_COUNTED(at=at, count=len(losses), expected=len(means)))


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    """The learning rate of every optimizer step, the learner's against the schedule's."""
    return [
        plot_series(
            spec.id, "learning rate", [r["lr"] for r in learner.records], expected(spec).lrs
        )
    ]


def scheduler_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """The scheduler's mistake, named from where its steps came, once the grader's replay of
    those very steps reproduces the learner's learning rates and weights in every case."""
    found: set[Diagnosis] = set()
    for spec in exercise.cases:
        trace = traces[spec.id]
        if trace.error is not None or trace.final is None:
            return []
        iterations = spec.epochs * spec.steps
        counts = [int(record["scheduler_steps"]) for record in trace.records]
        if len(counts) != iterations:
            return []  # the optimizer's steps are wrong too: not a scheduler model
        replayed = replay_epochs(spec, counts)
        if not all(
            record["lr"] is not None
            and within_tolerance(record["lr"], lr)
            and close(as_tensor(record["parameters"]), weight)
            for record, lr, weight in zip(
                trace.records, replayed.lrs, replayed.weights, strict=True
            )
        ):
            return []
        total = int(trace.final["scheduler_steps"])
        epochs, each_batch = right_counts(spec), list(range(iterations))
        if total == 0:
            found.add("scheduler-never")
        elif total == spec.epochs and counts == [count + 1 for count in epochs]:
            found.add("scheduler-before-optimizer")
        elif total == iterations > spec.epochs and counts == each_batch:
            found.add("scheduler-per-batch")
        elif total == iterations > spec.epochs and counts == [i + 1 for i in each_batch]:
            found |= {"scheduler-per-batch", "scheduler-before-optimizer"}
        elif total != spec.epochs or counts != epochs:
            return []  # stepped some other way: no name of ours is true of it
    order: tuple[Diagnosis, ...] = (
        "scheduler-never",
        "scheduler-per-batch",
        "scheduler-before-optimizer",
    )
    codes = tuple(code for code in order if code in found)
    return [Explanation(codes, "scheduler")] if codes else []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("losses_type", ("list", "tuple")),
    judge_case=judge_case,
    plots=plots,
)


# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="scheduler-per-batch",
        hint=Hint(
            where=(
                "Look at where `scheduler.step()` sits: inside the loop over batches, or after it?"
            ),
            what=(
                "The scheduler is stepped once per batch (before or after it), so the learning "
                "rate decays once per batch instead of once per epoch, and far too fast."
            ),
            fix="""Step the scheduler once per epoch, after the epoch's batches:

```python
for epoch in range(epochs):
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    scheduler.step()
```""",
            lesson="schedule",
        ),
        name="Scheduler stepped every batch",
        words=(
            "Your loop steps the scheduler once per batch, not once per epoch: the learning "
            "rate decays once per batch, so training slows down far sooner than the schedule "
            "says. Call `scheduler.step()` once per epoch, after the epoch's batches."
        ),
    ),
    Declared(
        code="scheduler-before-optimizer",
        hint=Hint(
            where=(
                "Look at what runs first in your loop: `scheduler.step()` or the first "
                "`optimizer.step()`?"
            ),
            what=(
                "The scheduler steps before the optimizer has taken its first step, so the "
                "schedule's first learning rate is skipped (PyTorch warns about this order)."
            ),
            fix="""Step the optimizer for every batch of the epoch, then the scheduler:

```python
for x, y in batches:
    ...
    optimizer.step()
scheduler.step()
```""",
            lesson="schedule",
        ),
        name="Scheduler stepped before the optimizer",
        words=(
            "Your loop steps the scheduler before the optimizer has stepped (PyTorch warns: "
            '"Detected call of `lr_scheduler.step()` before `optimizer.step()`"): the '
            "schedule's first learning rate is skipped, and training runs ahead of the "
            "schedule. Call `scheduler.step()` at the end of each epoch, after its optimizer "
            "steps."
        ),
    ),
    Declared(
        code="scheduler-never",
        hint=Hint(
            where="Look for `scheduler.step()` in your loop.",
            what=(
                "Nothing steps the scheduler, so the learning rate never changes from its first "
                "value."
            ),
            fix="""Call `scheduler.step()` at the end of every epoch:

```python
for epoch in range(epochs):
    for x, y in batches:
        ...
        optimizer.step()
    scheduler.step()
```""",
            lesson="schedule",
        ),
        name="Scheduler never stepped",
        words=(
            "Your loop never steps the scheduler, so the learning rate never decays: every "
            "epoch trains at the first one's. Call `scheduler.step()` once at the end of every "
            "epoch."
        ),
    ),
)

KIND = ExerciseKind(
    name="epoch-loop",
    summary="A loop over epochs with a learning-rate scheduler; returns each epoch's mean loss.",
    record=record_epochs,
    case_settings=frozenset({"epochs", "lr_step_size", "lr_gamma", "model", "loss"}),
    trace=TRACE,
    judge=JUDGE,
    models=scheduler_models,
    sandbox_helpers=(most_epoch_records,),
    diagnoses=DIAGNOSES,
)
