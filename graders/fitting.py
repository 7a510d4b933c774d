"""Fitting models of the update to a stepping loop's trajectory (the kinds with a `Replay`).

A model is the learner's own recorded calls replayed as a trusted loop (`graders.replay`),
first with the optimizer's numbers, then with one number fitted on the first case those do not
explain. When a replay explains every case, its calls name the mistakes (`order_mistakes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from graders.exercises import CaseSpec, Exercise
from graders.explanation import PRIORITY, Explanation, Traces, agrees, same_numbers
from graders.judging import as_tensor, call_stream, case_data
from graders.kind import ExerciseKind
from graders.replay import Forward, Numbers, PerCase, replay
from graders.report import Diagnosis
from graders.trace import CaseTrace

# A replay runs here, outside the sandbox: a loop that made many more calls than a right one
# (3 per iteration, or 2 + one backward per micro-batch) is not replayed, so no learner can make
# the grader do much more work than their own run did.
MAX_CALLS_PER_ITERATION = 8


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
    return sorted(set(found), key=PRIORITY.index)


def _order_note(
    kind: ExerciseKind, exercise: Exercise, traces: Traces, codes: Sequence[Diagnosis]
) -> str:
    """Where, in the first visible case, the calls show the main mistake."""
    if codes and codes[0] == "missing-zero-grad":
        return _cleared_after_step_note(exercise, traces)
    visible = next((s for s in exercise.cases if not s.hidden), None)
    if visible is None or kind.replay is None or not kind.replay.per_call or not codes:
        return ""
    per_call = [record.get("calls", []) for record in traces[visible.id].records]
    where = ""
    if codes[0] == "backward-twice":
        count = max(c.count("backward") for c in per_call) // (visible.micro_batches or 1)
        times = {2: "twice", 3: "three times"}.get(count, f"{count} times")
        return (
            f"Your gradients are exactly {times} the correct ones: `backward()` ran {times} "
            "before the step."
        )
    if codes[0] == "zero-grad-skipped":
        where = ", ".join(str(i + 1) for i, c in enumerate(per_call) if "zero_grad" not in c)
        what = "zero_grad() did not run"
    elif codes[0] == "step-skipped":
        where = ", ".join(str(i + 1) for i, c in enumerate(per_call) if "step" not in c)
        what = "optimizer.step() did not run"
    if not where:
        return ""
    return f"In case `{visible.id}`, {what} on call(s) {where}."


def _cleared_after_step_note(exercise: Exercise, traces: Traces) -> str:
    """For a loop that clears after each step, not before backward(): why that is not enough
    here (the visible case that hands in stale gradients shows it), or "" for any other."""
    stale = next((s for s in exercise.cases if s.stale_grads and not s.hidden), None)
    if stale is None:
        return ""
    calls = call_stream(traces[stale.id])
    if "backward" not in calls or "step" not in calls:
        return ""
    first_backward, first_step = calls.index("backward"), calls.index("step")
    if "zero_grad" in calls[:first_backward] or "zero_grad" not in calls[first_step:]:
        return ""
    return (
        "Your code clears the gradients after `step()`, ready for the next batch: a fine style "
        f"in a loop that starts clean. But case `{stale.id}` hands your code gradients already "
        "in `.grad`, as an earlier step that did not clear would leave them, and your first "
        "`backward()` adds to them. Clear before `backward()`."
    )


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
    (lambda s: float(s.batch_size * s.out_features), "loss-sum-not-mean"),
    (lambda s: float(s.batch_size), "loss-sum-not-mean"),
    (lambda s: float(s.batch_size * s.out_features * s.micro_batches), "loss-sum-not-mean"),
    (lambda s: float(s.micro_batches or 1), "wrong-loss-scaling"),
    (lambda s: 1.0 / (s.micro_batches or 1), "wrong-loss-scaling"),
)


# A candidate model: its numbers, the mistake it names, which family it is (Explanation.model)
# and its note.
Candidate = tuple[Numbers, Diagnosis, str, str]


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
    start = case_data(spec).weight
    moved = _ratio(as_tensor(mine["weight"]) - start, as_tensor(theirs["weight"]) - start)
    grad_ratio = _ratio(_tensor(mine["weight_grad"]), _tensor(theirs["weight_grad"]))
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
                            "",
                        )
                    )
        # A scale that changes every step: the step's own loss (`loss.backward(loss)`).
        found.append((replace(numbers, times_loss=True), "gradients-times-loss", "times-loss", ""))
        k = _snap(scale)
        note = f"Your gradients are exactly {k:.4g} times the correct ones."
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
                f"Your updates are {ratio:.4g} times the size a step of the optimizer makes.",
            )
        )
        value = moved * spec.lr
        found.append(
            (
                replace(numbers, lr=_constant(value)),
                "wrong-learning-rate",
                "lr-constant",
                f"Your updates use a learning rate of {value:.4g} in every case, not the "
                "optimizer's.",
            )
        )
    if momentum:
        found.append(
            (replace(numbers, momentum=_constant(0.0)), "wrong-momentum", "no-momentum", "")
        )
    found.append(
        (replace(numbers, loss_after_update=True), "loss-after-update", "loss-after-update", "")
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
        found.append(Explanation(tuple(sorted(set(codes), key=PRIORITY.index)), model, note))
    return found


def _merged_order_mistakes(
    kind: ExerciseKind, exercise: Exercise, traces: Traces, by_hand: bool
) -> list[Diagnosis]:
    found = {
        code
        for spec in exercise.cases
        for code in order_mistakes(kind, spec, call_stream(traces[spec.id]), by_hand)
    }
    return sorted(found, key=PRIORITY.index)
