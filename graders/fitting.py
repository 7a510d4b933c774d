"""Fitting models of the update to a stepping loop's trajectory (the kinds with a `Replay`).

One idea over 400 lines: the models of the update fitted to a stepping loop, and the order of
the mistakes they name.

A model is the learner's own recorded calls replayed as a trusted loop (`graders.replay`),
first with the optimizer's numbers, then with one number fitted on the first case those do not
explain. When a replay explains every case, its calls name the mistakes (`order_mistakes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces, agrees, same_numbers
from graders.judging import as_tensor, call_stream, case_data
from graders.kind import ExerciseKind
from graders.replay import Forward, Numbers, PerCase, replay
from graders.report import Diagnosis
from graders.sentences import Said, Sentence
from graders.trace import CaseTrace

# A replay runs here, outside the sandbox: a loop that made many more calls than a right one
# (3 per iteration, or 2 + one backward per micro-batch) is not replayed, so no learner can make
# the grader do much more work than their own run did.
MAX_CALLS_PER_ITERATION = 8

# The facts a fitted model shows, said when the grade is read (graders.sentences); their
# numbers come from the visible cases alone (graders.diagnosis.diagnose).
TIMES_OVER = Sentence(
    "fitting/backward-repeated",
    "Your gradients are exactly {times} the correct ones: `backward()` ran {times} before the "
    "step.",
)
TWICE = Sentence("fitting/twice", "twice")
THREE_TIMES = Sentence("fitting/three-times", "three times")
COUNT_TIMES = Sentence("fitting/count-times", "{count} times")
NOT_RUN_ON_CALLS = Sentence(
    "fitting/not-run-on-calls", "In case `{case}`, {what} did not run on call(s) {calls}."
)
ZERO_GRAD = Sentence("fitting/zero-grad", "zero_grad()")
STEP = Sentence("fitting/step", "optimizer.step()")
CLEARED_AFTER_STEP = Sentence(
    "fitting/cleared-after-step",
    "Your code clears the gradients after `step()`, ready for the next batch: a fine style in "
    "a loop that starts clean. But case `{case}` hands your code gradients already in `.grad`, "
    "as an earlier step that did not clear would leave them, and your first `backward()` adds "
    "to them. Clear before `backward()`.",
)
GRADIENTS_TIMES = Sentence(
    "fitting/gradients-times", "Your gradients are exactly {factor:.4g} times the correct ones."
)
UPDATES_TIMES = Sentence(
    "fitting/updates-times",
    "Your updates are {ratio:.4g} times the size a step of the optimizer makes.",
)
CONSTANT_LR = Sentence(
    "fitting/constant-lr",
    "Your updates use a learning rate of {lr:.4g} in every case, not the optimizer's.",
)


@dataclass(frozen=True)
class _Attempt:
    """How a model did: `unexplained` is the first case it got wrong, with its trajectory there
    (None when the calls could not be replayed); both None when it explained every case."""

    unexplained: CaseSpec | None = None
    trajectory: CaseTrace | None = None


def _attempt(
    kind: ExerciseKind,
    exercise: Exercise,
    traces: Traces,
    forward: Forward,
    numbers: Numbers,
    first: CaseSpec | None = None,
) -> _Attempt:
    """Replay case by case, `first` first, and stop at the first case the model gets wrong."""
    assert kind.replay is not None
    specs = sorted(exercise.cases, key=lambda spec: spec != first)
    for spec in specs:
        model = replay(kind.record, kind.replay, spec, traces[spec.id], forward, numbers)
        if model is None:
            return _Attempt(spec)
        learner = traces[spec.id]
        if not (same_numbers(model, learner) and agrees(call_stream(learner), call_stream(model))):
            return _Attempt(spec, model)
    return _Attempt()


def _iterations(kind: ExerciseKind, spec: CaseSpec) -> int:
    assert kind.replay is not None
    return kind.replay.iterations(spec)


def order_mistakes(
    kind: ExerciseKind, spec: CaseSpec, calls: Sequence[str], stepped_by_hand: bool
) -> list[Diagnosis]:
    """The mistakes a replayed loop's order of calls makes in one case, in the lesson's order.

    Called only once the replay of exactly these calls has explained the learner's numbers, so
    each name read here is borne out by them. A step's segment is everything since the previous
    step: it should clear, then run backward (once per micro-batch), then step.
    """
    iterations, micro = _iterations(kind, spec), spec.micro_batches
    backwards, steps = calls.count("backward"), calls.count("step")
    found: list[Diagnosis] = []
    if not stepped_by_hand:
        if not backwards and steps:
            return ["missing-backward"]
        if backwards and not steps:
            return ["missing-step"]
        if steps and calls.index("step") < calls.index("backward"):
            found.append("step-before-backward")
    # Without steps (an update by hand), an iteration ends with its last backward instead.
    per_iteration = max(1, backwards // iterations)
    segments: list[list[str]] = [[]]
    for call in calls:
        if call == "step" and not stepped_by_hand:
            segments.append([])
            continue
        segments[-1].append(call)
        if stepped_by_hand and segments[-1].count("backward") == per_iteration:
            segments.append([])
    stepped = [s for s in segments[: len(segments) - 1] if "backward" in s]
    unclear = []
    for index, segment in enumerate(stepped):
        first = segment.index("backward")
        last = len(segment) - 1 - segment[::-1].index("backward")
        if not stepped_by_hand and "zero_grad" in segment[last:]:
            found.append("zero-grad-before-step")
        if micro and "zero_grad" in segment[first:last]:
            found.append("zero-grad-inside-accumulation")
        if "zero_grad" not in segment[:first]:
            unclear.append(index)
    if stepped and (len(unclear) == len(stepped) or unclear == [0]):
        found.append("missing-zero-grad")
    elif unclear and not stepped_by_hand:
        found.append("zero-grad-skipped")
    if not stepped_by_hand:
        # Each step right after its own backward(): two steps after all of them are not this.
        per_micro_batch = all(s.count("backward") == 1 for s in segments[:-1])
        if micro > 1 and steps == backwards == iterations * micro and per_micro_batch:
            found.append("step-per-microbatch")
        elif steps > iterations:
            found.append("step-twice")
        elif steps < iterations:
            found.append("step-skipped")
    per_step = iterations * (micro or 1)  # backward calls a right loop makes
    if backwards >= 2 * per_step and backwards % per_step == 0:
        found.append("backward-twice")
    return sorted(set(found), key=_priority)


def _order_note(
    kind: ExerciseKind, exercise: Exercise, traces: Traces, codes: Sequence[Diagnosis]
) -> Said | None:
    """Where, in the first visible case, the calls show the main mistake."""
    if codes and codes[0] == "missing-zero-grad":
        return _cleared_after_step_note(exercise, traces)
    visible = next((s for s in exercise.cases if not s.hidden), None)
    if visible is None or kind.replay is None or not kind.replay.per_call or not codes:
        return None
    per_call = [record.get("calls", []) for record in traces[visible.id].records]
    if codes[0] == "backward-twice":
        count = max(c.count("backward") for c in per_call) // (visible.micro_batches or 1)
        times = {2: TWICE(), 3: THREE_TIMES()}.get(count) or COUNT_TIMES(count=count)
        return TIMES_OVER(times=times)
    skipped = {"zero-grad-skipped": ("zero_grad", ZERO_GRAD), "step-skipped": ("step", STEP)}
    if codes[0] not in skipped:
        return None
    call, what = skipped[codes[0]]
    where = ", ".join(str(i + 1) for i, c in enumerate(per_call) if call not in c)
    return NOT_RUN_ON_CALLS(case=visible.id, what=what(), calls=where) if where else None


def _cleared_after_step_note(exercise: Exercise, traces: Traces) -> Said | None:
    """For a loop that clears after each step, not before backward(): why that is not enough
    here (the visible case that hands in stale gradients shows it), or None for any other."""
    stale = next((s for s in exercise.cases if s.stale_grads and not s.hidden), None)
    if stale is None:
        return None
    calls = call_stream(traces[stale.id])
    if "backward" not in calls or "step" not in calls:
        return None
    first_backward, first_step = calls.index("backward"), calls.index("step")
    if "zero_grad" in calls[:first_backward] or "zero_grad" not in calls[first_step:]:
        return None
    return CLEARED_AFTER_STEP(case=stale.id)


def _constant(value: float) -> PerCase:
    return lambda spec: value


def _lr_times(ratio: float) -> PerCase:
    return lambda spec: ratio * spec.lr


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 * max(1.0, abs(b))


def _snap(value: float) -> float:
    return float(round(value)) if _near(value, round(value)) and round(value) else value


def _ratio(mine: torch.Tensor | None, model: torch.Tensor | None) -> float | None:
    """The factor c minimising |mine - c * model|: how many times the model's is the learner's."""
    if mine is None or model is None:
        return None
    a, b = mine.flatten(), model.flatten()
    if a.shape != b.shape or not bool(b.any()):
        return None
    return float(a @ b / (b @ b))


def _tensor(values: Any) -> torch.Tensor | None:
    return None if values is None else as_tensor(values)


# Gradient scales that depend on the case, and what each one means.
SCALES: tuple[tuple[Callable[[CaseSpec], float], Diagnosis], ...] = (
    (lambda s: float(s.batch_size * s.values_per_example), "loss-sum-not-mean"),
    (lambda s: float(s.batch_size), "loss-sum-not-mean"),
    (lambda s: float(s.batch_size * s.values_per_example * s.micro_batches), "loss-sum-not-mean"),
    (lambda s: float(s.micro_batches or 1), "wrong-loss-scaling"),
    (lambda s: 1.0 / (s.micro_batches or 1), "wrong-loss-scaling"),
    # A mean loss divided by the batch's size again: 1/B, another scale in each case.
    (lambda s: 1.0 / s.batch_size, "loss-divided-by-batch"),
)


# A candidate model: its numbers, the mistake it names, which family it is (Explanation.model)
# and its note.
Candidate = tuple[Numbers, Diagnosis, str, Said | None]


def _candidates(
    traces: Traces, spec: CaseSpec, model: CaseTrace, numbers: Numbers, momentum: bool
) -> list[Candidate]:
    """Models one number away from `numbers`, fitted on the first case those do not explain.

    That case may be hidden, and a note then holds a number of it: only the fit on the visible
    cases alone (graders.diagnosis.diagnose) is ever said.
    """
    if not traces[spec.id].records or not model.records:
        return []
    mine, theirs = traces[spec.id].records[0], model.records[0]
    data = case_data(spec)  # the first layer's weight speaks for the model
    start, first = data.weight, data.first
    moved = _ratio(as_tensor(mine[first]) - start, as_tensor(theirs[first]) - start)
    grad_ratio = _ratio(_tensor(mine[f"{first}_grad"]), _tensor(theirs[f"{first}_grad"]))
    scale = grad_ratio if grad_ratio is not None else moved
    found: list[Candidate] = []
    if scale is not None and scale > 0 and not _near(scale, 1):
        for index, (family, code) in enumerate(SCALES):
            if _near(family(spec), scale):
                for scaled in (False, True):
                    found.append(
                        (
                            replace(numbers, grad_scale=family, loss_scaled=scaled),
                            code,
                            f"scale-{index}-{scaled}",
                            None,
                        )
                    )
        # A scale that changes every step: the step's own loss (`loss.backward(loss)`).
        found.append(
            (replace(numbers, times_loss=True), "gradients-times-loss", "times-loss", None)
        )
        k = _snap(scale)
        note = GRADIENTS_TIMES(factor=k)
        for scaled in (False, True):
            found.append(
                (
                    replace(numbers, grad_scale=_constant(k), loss_scaled=scaled),
                    "gradients-scaled",
                    f"scaled-{scaled}",
                    note,
                )
            )
    if moved is not None and moved > 0 and not _near(moved, 1):
        ratio = _snap(moved)
        found.append(
            (
                replace(numbers, lr=_lr_times(ratio)),
                "wrong-learning-rate",
                "lr-times",
                UPDATES_TIMES(ratio=ratio),
            )
        )
        value = moved * spec.lr
        found.append(
            (
                replace(numbers, lr=_constant(value)),
                "wrong-learning-rate",
                "lr-constant",
                CONSTANT_LR(lr=value),
            )
        )
    if momentum:
        found.append(
            (replace(numbers, momentum=_constant(0.0)), "wrong-momentum", "no-momentum", None)
        )
    if spec.optimizer in ("adam", "adamw"):
        # SGD's momentum dropped is the model above; Adam's state is more than one number.
        found.append((replace(numbers, fresh_state=True), "optimizer-state-reset", "fresh", None))
    found.append(
        (replace(numbers, loss_after_update=True), "loss-after-update", "loss-after-update", None)
    )
    return found


def stepping_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """Replays of the learner's calls that explain their trajectory, and the mistakes they make.

    First the calls as recorded with the optimizer's numbers; then with one number fitted (a
    gradient scale, a learning rate, a momentum, the loss read after the update). A loop that
    recorded no step at all may have updated the weights by hand: that is tried last.
    """
    if any(
        len(call_stream(traces[spec.id]))
        > MAX_CALLS_PER_ITERATION * _iterations(kind, spec) * max(1, spec.micro_batches)
        for spec in exercise.cases
    ):
        return []  # far more calls than any loop we model makes: not worth replaying here
    stepless = not any("step" in call_stream(trace) for trace in traces.values())
    for by_hand in (False, True) if stepless else (False,):
        for forward in Forward:
            found = _replayed_models(kind, exercise, traces, forward, by_hand)
            if found:
                return found
    return []


def _replayed_models(
    kind: ExerciseKind, exercise: Exercise, traces: Traces, forward: Forward, by_hand: bool
) -> list[Explanation]:
    momentum = any(spec.momentum for spec in exercise.cases)
    numbers = Numbers(update_by_hand=by_hand)
    order = _merged_order_mistakes(kind, exercise, traces, by_hand)
    extra: tuple[Diagnosis, ...] = ("wrong-momentum",) if by_hand and momentum else ()
    base = _attempt(kind, exercise, traces, forward, numbers)
    if base.unexplained is None:
        codes = tuple(order) + extra
        return (
            [Explanation(codes, "calls", _order_note(kind, exercise, traces, codes))]
            if codes
            else []
        )
    if base.trajectory is None:
        return []  # these calls cannot be replayed as a loop of this kind
    found = []
    for candidate, code, model, note in _candidates(
        traces, base.unexplained, base.trajectory, numbers, momentum
    ):
        if _attempt(kind, exercise, traces, forward, candidate, base.unexplained).unexplained:
            continue
        codes = (code, *order, *[e for e in extra if e != code])
        found.append(Explanation(tuple(sorted(set(codes), key=_priority)), model, note))
    return found


def _merged_order_mistakes(
    kind: ExerciseKind, exercise: Exercise, traces: Traces, by_hand: bool
) -> list[Diagnosis]:
    found = {
        code
        for spec in exercise.cases
        for code in order_mistakes(kind, spec, call_stream(traces[spec.id]), by_hand)
    }
    return sorted(found, key=_priority)


def _priority(code: Diagnosis) -> int:
    """Where a mistake found with others is named: in DECLARED's order, the lesson's."""
    return PRIORITY.index(code)


# The diagnoses this module's models give (graders.diagnoses), in the order mistakes found
# together are named: the lesson's order first.
DECLARED: tuple[Declared, ...] = (
    Declared(
        code="missing-backward",
        name="No backward pass",
        words=(
            "Your loop never calls `loss.backward()`, so there are no gradients for the "
            "optimizer to use and the weights never change."
        ),
        about="steps",
        order=True,
        hint=Hint(
            where="Look at how the gradients in `.grad` are made in each step.",
            what=(
                "The loss is computed but no gradients come from it: `loss.backward()` is not "
                "called on the loss of this batch, so `step()` has no new gradients to use."
            ),
            fix="""Call `backward()` on the loss, between clearing and stepping:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="missing-step",
        name="No optimizer step",
        words=(
            "Your loop computes gradients but never calls `optimizer.step()`, so the weights "
            "never change."
        ),
        about="steps",
        order=True,
        hint=Hint(
            where="Look for the line that changes the weights: which call applies the gradients?",
            what=(
                "`backward()` only computes gradients. Without `optimizer.step()` the weights "
                "never change."
            ),
            fix="""Call the optimizer after the backward pass:

```python
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="step-before-backward",
        name="Step before backward",
        words=(
            "Your optimizer stepped before `backward()`: each update used the gradients that "
            "were lying around — the previous batch's, or none at all — not this batch's. "
            "Nothing errors and the loss curve just looks noisy. Clear the gradients, call "
            "`loss.backward()`, and only then `optimizer.step()`."
        ),
        about="steps",
        order=True,
        hint=Hint(
            where="Look at the order of `optimizer.step()` and `loss.backward()` in one step.",
            what=(
                "`step()` uses the gradients that are in `.grad` when it runs. Called before "
                "`backward()`, it updates the weights with the old gradients, not this batch's."
            ),
            fix="""Compute this batch's gradients first, then step:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="zero-grad-before-step",
        name="Cleared before the step",
        words=(
            "Your loop clears the gradients between `backward()` and `step()`, so the optimizer "
            "steps on empty gradients and the weights never move. Clear them at the start of "
            "the step, before `backward()`."
        ),
        about="steps",
        order=True,
        said_in={
            "micro-batches": (
                "Your function clears the gradients between the micro-batches' `backward()` and "
                "`step()`, so the optimizer steps on empty gradients and the weights never "
                "move. Clear them once, before the first micro-batch's `backward()`."
            ),
        },
        hint=Hint(
            where="Look at what runs between `loss.backward()` and `optimizer.step()`.",
            what=(
                "`zero_grad()` between them throws away the gradients `backward()` just "
                "computed, so `step()` has nothing to move the weights with."
            ),
            fix="""Clear before the backward pass, never between it and the step:

```python
optimizer.zero_grad()
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="zero-grad-inside-accumulation",
        name="Cleared inside accumulation",
        words=(
            "Your loop clears the gradients inside the micro-batch loop, so each micro-batch "
            "wipes out the ones before it and only the last one counts in the update. Clear "
            "once, before the first micro-batch."
        ),
        about="micro-batches",
        hint=Hint(
            where=(
                "Look at where `optimizer.zero_grad()` is: inside the loop over micro-batches, "
                "or before it?"
            ),
            what=(
                "Clearing inside the loop throws away the gradients of the earlier "
                "micro-batches: only the last one's reach the step."
            ),
            fix="""Clear once, before the loop:

```python
optimizer.zero_grad()
for x, y in micro_batches:
    loss = loss_fn(model(x), y) / len(micro_batches)
    loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="step-per-microbatch",
        name="Step per micro-batch",
        words=(
            "Your loop steps once per micro-batch. Accumulation means the opposite: run "
            "`backward()` on every micro-batch, letting the gradients add up in `.grad`, then "
            "step **once**, so the update equals one step on the whole batch."
        ),
        about="micro-batches",
        hint=Hint(
            where=(
                "Look at where `optimizer.step()` is: inside the loop over micro-batches, or "
                "after it?"
            ),
            what=(
                "Accumulating means one step for all the micro-batches together. A step inside "
                "the loop updates the weights once per micro-batch."
            ),
            fix="""Step once, after the loop:

```python
optimizer.zero_grad()
for x, y in micro_batches:
    loss = loss_fn(model(x), y) / len(micro_batches)
    loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="missing-zero-grad",
        name="Gradients not cleared before backward",
        words=(
            "Your gradients **accumulate**: PyTorch adds each new gradient to whatever is "
            "already in `.grad`, and your loop does not clear it before `backward()`. So a step "
            "used the sum of this batch's gradient and whatever `.grad` held before it. Call "
            "`optimizer.zero_grad()` at the start of the step, before `backward()`."
        ),
        about="steps",
        order=True,
        hint=Hint(
            where=(
                "Look at the start of each training step, before `loss.backward()`: what is in "
                "`.grad` at that moment?"
            ),
            what=(
                "PyTorch adds each new gradient to what `.grad` already holds. Without clearing "
                "it first, every step uses the sum of this batch's gradient and the old ones."
            ),
            fix="""Clear the gradients once per step, before the backward pass:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="zero-grad-skipped",
        name="Clearing skipped",
        words=(
            "Your loop clears the gradients on some calls but not on others. PyTorch adds each "
            "new gradient to whatever is already in `.grad`, so after a call that did not "
            "clear, the step used the sum of the last few calls' gradients. Call "
            "`optimizer.zero_grad()` on every call, before `backward()`."
        ),
        about="steps",
        order=True,
        said_in={
            "whole-loop": (
                "Your loop clears the gradients on some batches but not on others. PyTorch adds "
                "each new gradient to whatever is already in `.grad`, so after a batch that did "
                "not clear, the step used the sum of the last few batches' gradients. Call "
                "`optimizer.zero_grad()` for every batch, before `backward()`."
            ),
        },
        hint=Hint(
            where="Look at any condition or loop around `optimizer.zero_grad()`.",
            what=(
                "Some iterations do not clear the gradients, so their step uses the sum of this "
                "batch's gradient and an earlier one."
            ),
            fix="""Clear on every iteration, before the backward pass:

```python
for x, y in batches:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
```""",
        ),
    ),
    Declared(
        code="step-skipped",
        name="Step skipped",
        words=(
            "On some calls your loop never reached `optimizer.step()`: those calls computed "
            "gradients that no step applied. Step on every call."
        ),
        about="steps",
        order=True,
        said_in={
            "whole-loop": (
                "On some batches your loop never reached `optimizer.step()`: their gradients "
                "were computed and no step applied them. Step once for every batch."
            ),
        },
        hint=Hint(
            where="Look at any condition or loop around `optimizer.step()`.",
            what="Some batches get no step: the weights are not updated on those iterations.",
            fix="""Step on every batch, unconditionally:

```python
for x, y in batches:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
```""",
        ),
    ),
    Declared(
        code="step-twice",
        name="Step run twice",
        words=(
            "Your loop calls `optimizer.step()` more than once per iteration, on the gradients "
            "already in `.grad`. Step once, after `backward()`."
        ),
        about="steps",
        said_in={
            "micro-batches": (
                "Your function calls `optimizer.step()` more than once per call: accumulating "
                "is one step, after the last micro-batch's `backward()`. Step once, at the end."
            ),
        },
        hint=Hint(
            where="Count the calls of `optimizer.step()` in one step.",
            what=(
                "Each `step()` moves the weights again with the same gradients: two calls make "
                "a step twice as long."
            ),
            fix="""One step per batch:

```python
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="backward-twice",
        name="Backward run twice",
        words=(
            "Your gradients are a whole multiple of the correct ones: `backward()` ran more "
            "than once before the step. PyTorch adds each new gradient to whatever is already "
            "in `.grad`, so two backward passes give the sum of both. Call `loss.backward()` "
            "once per step."
        ),
        about="steps",
        hint=Hint(
            where="Count the calls of `backward()` in one step.",
            what=(
                "Each `backward()` adds the gradient again: two calls on the same batch make a "
                "step with twice the gradient."
            ),
            fix="""One backward pass per loss:

```python
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="wrong-loss-scaling",
        name="Loss not divided by micro-batches",
        words=(
            "Your micro-batch losses are not divided by how many there are. Gradients add up in "
            "`.grad`, so after N micro-batches it holds N times the whole batch's gradient. "
            "Divide each micro-batch's loss by `len(micro_batches)` before `backward()`."
        ),
        about="micro-batches",
        hint=Hint(
            where="Look at the loss of each micro-batch, just before its `backward()`.",
            what=(
                "Gradients of the micro-batches add up. To get the gradient of the mean over "
                "the whole batch, each micro-batch's loss must be divided by the number of "
                "micro-batches, once."
            ),
            fix="""Scale each micro-batch's loss before its backward pass:

```python
loss = loss_fn(model(x), y) / len(micro_batches)
loss.backward()
```""",
        ),
    ),
    Declared(
        code="loss-sum-not-mean",
        name="Summed loss, not mean",
        words=(
            "Your gradients are a whole multiple of the correct ones, the batch's size or its "
            "number of values: the loss was summed over the batch, not averaged. The "
            "`loss_fn` you were given averages; use it."
        ),
        about="steps",
        hint=Hint(
            where="Look at how the loss is computed: `loss_fn`, or a sum of your own?",
            what=(
                "A sum over the batch gives a gradient that many times larger than the mean the "
                "exercise uses (the `loss_fn` you are given averages)."
            ),
            fix="""Use the loss function you are given:

```python
loss = loss_fn(model(x), y)
```""",
        ),
    ),
    Declared(
        code="loss-divided-by-batch",
        name="Loss divided by the batch size",
        words=(
            "Your gradients are the correct ones divided by the batch's size, in every case: "
            "the loss (or its gradient) was divided by the batch size, although the `loss_fn` "
            "you were given already averages over the batch. Call `backward()` on the loss "
            "that `loss_fn` computes, as it is."
        ),
        about="steps",
        hint=Hint(
            where="Look for a division by the batch size (`len(x)`, `x.shape[0]`) of the loss.",
            what=(
                "The `loss_fn` you are given returns the mean over the batch already; dividing "
                "it by the batch size again makes every step that many times too small."
            ),
            fix="""Take the loss as `loss_fn` returns it:

```python
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="gradients-scaled",
        name="Gradients scaled",
        words=(
            "Your gradients are a constant multiple of the correct ones: the loss, or the "
            "gradient, was scaled before the step. Call `backward()` on the loss the `loss_fn` "
            "you were given computes, as it is."
        ),
        about="steps",
        hint=Hint(
            where=(
                "Look at anything that multiplies or divides the loss or the gradients before "
                "the step."
            ),
            what=(
                "The steps have the right direction but the wrong size: the gradients are "
                "scaled by a constant the exercise does not ask for."
            ),
            fix="""Take the loss as `loss_fn` returns it, and leave `.grad` as `backward()` made it:

```python
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="wrong-learning-rate",
        name="Wrong learning rate",
        words=(
            "Your updates point the right way but have the wrong size: they do not use the "
            "optimizer's learning rate. Let `optimizer.step()` make the update with the "
            "optimizer's own settings."
        ),
        about="steps",
        hint=Hint(
            where=(
                "Look at how the weights are updated: is it the optimizer you are given, with "
                "its own learning rate?"
            ),
            what=(
                "The update has the right direction but not the optimizer's step size: a "
                "learning rate other than the optimizer's is used."
            ),
            fix="""Let the optimizer you are given make the update:

```python
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="gradients-times-loss",
        name="Gradients multiplied by the loss",
        words=(
            "Your gradients are the correct ones multiplied by the loss itself, a factor that "
            "changes every step: what `loss.backward(loss)` computes, since the argument of "
            "`backward()` multiplies every gradient. Call `loss.backward()` with no argument."
        ),
        about="steps",
        hint=Hint(
            where="Look at the arguments you pass to `loss.backward()`.",
            what=(
                "`loss.backward(loss)` multiplies every gradient by the loss's own value, a "
                "scale that changes from step to step. For a scalar loss, `backward()` needs no "
                "argument."
            ),
            fix="""Call `backward()` with no argument:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="wrong-momentum",
        name="Momentum missing",
        words=(
            "Your updates do not use the optimizer's momentum: an update written by hand, `p -= "
            "lr * p.grad`, is plain SGD, and a momentum set by hand is not the optimizer's. Let "
            "`optimizer.step()` make the update: it keeps the optimizer's momentum."
        ),
        about="steps",
        hint=Hint(
            where="Look at how the weights are updated when the optimizer has momentum.",
            what=(
                "Updating the weights by hand (`p -= lr * p.grad`) ignores the optimizer's "
                "momentum, which remembers earlier gradients."
            ),
            fix="""Let the optimizer step; it keeps the momentum:

```python
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="optimizer-state-reset",
        name="Optimizer state starts again",
        words=(
            "Each of your steps is the first step of an optimizer with no state: what Adam "
            "keeps between steps (its running averages and its step count) starts again at "
            "every call, so every update is as large as a first one. Step the `optimizer` you "
            "were given: it keeps its state between calls."
        ),
        about="steps",
        hint=Hint(
            where="Look at where the optimizer that steps comes from, and what it remembers.",
            what=(
                "Adam's update depends on the running averages and the step count it keeps. "
                "If they start again at every call, each step is a first step."
            ),
            fix="""Step the optimizer you are given:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="optimizer-recreated",
        name="Optimizer made anew",
        words=(
            "Your code makes an optimizer of its own, again and again, where it should use the "
            "`optimizer` it was given. A new optimizer starts with no state (SGD's momentum "
            "buffers, Adam's running averages and step count), so what it would carry from one "
            "step to the next is lost. Use the `optimizer` you were given: it keeps its state "
            "between steps."
        ),
        about="steps",
        hint=Hint(
            where=(
                "Look for `torch.optim` inside your function: which optimizer does `step()` "
                "belong to?"
            ),
            what=(
                "An optimizer built inside the step starts with empty state every call: its "
                "momentum (or Adam's averages) is thrown away each time. The optimizer handed "
                "to your function keeps that state between calls."
            ),
            fix="""Use the optimizer you are given; do not build a new one:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
    Declared(
        code="loss-after-update",
        name="Loss taken after the update",
        words=(
            "Your weights are right, but the loss you return was computed after the update, at "
            "the new weights. Return the loss of the forward pass that `backward()` used, "
            "before `optimizer.step()`: `loss.item()`."
        ),
        about="steps",
        hint=Hint(
            where=(
                "Look at which loss you return or record: computed before or after "
                "`optimizer.step()`?"
            ),
            what=(
                "The loss is measured after the weights changed. The exercise asks for the loss "
                "of the batch the step was computed on, before the update."
            ),
            fix="""Keep the loss from the forward pass of this step:

```python
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
return loss.item()
```""",
        ),
    ),
    Declared(
        code="loss-detached",
        name="Loss cut off from the model",
        words=(
            "Your code calls `backward()`, but on a loss cut off from the model: `.detach()`, "
            "`.data`, or `requires_grad = True` set on the loss itself gives a tensor with no "
            "path back to the weights, so `backward()` computes no gradient for them. Setting "
            "`requires_grad` silences PyTorch's error; it does not reconnect the graph. Call "
            "`backward()` on the loss computed from `model(x)`, as `loss_fn` returns it."
        ),
        about="steps",
        hint=Hint(
            where=(
                "Look at the loss you call `backward()` on: follow it back to the model's "
                "output. Is anything between them cutting it off?"
            ),
            what=(
                "`.detach()`, `.data` or setting `requires_grad` by hand make a loss that no "
                "longer depends on the model's parameters. Its `backward()` runs, but no "
                "gradient reaches the weights, so `step()` has nothing to apply."
            ),
            fix="""Call `backward()` on the loss exactly as the loss function returns it:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
)
PRIORITY = tuple(record.code for record in DECLARED)
