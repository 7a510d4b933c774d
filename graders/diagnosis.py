"""Naming the mistake: the explanations of a wrong trajectory that its numbers and calls agree on.

An explanation is a known buggy loop of the exercise (its `exercise.toml` variants, run here) or a
small model fitted here to the learner's recorded weights, gradients, losses and calls
(`graders.replay` for the kinds that step; below for the two kinds that only read). It is given
only when it reproduces the learner's recorded values within the judging tolerance *and* the
learner's recorded order of calls agrees with it. When explanations with different names fit,
all of them are said; when none fits, the diagnosis is `incorrect` and the checks say what first
went wrong. Never the nearest name.

The call order comes from the sandbox and could be forged: it only ever rules explanations out.
The score is fixed by the checks before any of this runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from graders.exercises import CaseSpec, Exercise, Kind
from graders.feedback import EXPLANATIONS
from graders.judging import (
    as_tensor,
    batch_of,
    call_stream,
    case_data,
    cleared,
    close,
    close_values,
    loss_and_gradients,
    same_trace,
    same_value,
)
from graders.kinds import JUDGES
from graders.kinds.magnitude import expected_magnitudes
from graders.replay import Forward, Numbers, PerCase, replay
from graders.report import Check, Diagnosis
from graders.trace import CaseTrace

Traces = dict[str, CaseTrace]
# Fields holding what the learner's function returned: a model explains the updates, and the
# returned value when it is a number; the type of what was returned is the checks' business.
TYPE_FIELDS = frozenset({"loss_type", "losses_type", "result_type", "value_type"})
RETURN_FIELDS = frozenset(
    {"loss", "losses", "first", "second", "first_after_clearing", "second_after_clearing", "value"}
)
# The order in which mistakes found together are named: the lesson's order first.
PRIORITY: tuple[Diagnosis, ...] = (
    "missing-backward",
    "missing-step",
    "step-before-backward",
    "zero-grad-before-step",
    "zero-grad-inside-accumulation",
    "step-per-microbatch",
    "missing-zero-grad",
    "zero-grad-skipped",
    "step-skipped",
    "step-twice",
    "backward-twice",
    "wrong-loss-scaling",
    "loss-sum-not-mean",
    "gradients-scaled",
    "wrong-learning-rate",
    "wrong-momentum",
    "loss-after-update",
)


@dataclass(frozen=True)
class Explanation:
    """The mistakes one model of the learner's code makes, the main one first, and its note."""

    codes: tuple[Diagnosis, ...]
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    """The diagnosis, a note for the learner, and other diagnoses that fit as well."""

    diagnosis: Diagnosis
    note: str
    also: tuple[Diagnosis, ...] = ()


def agrees(recorded: Sequence[str], model: Sequence[str]) -> bool:
    """Does a recorded order of calls agree with a model's?

    The backward and step calls must be the same, in the same order; a recorded zero_grad must
    fall where the model clears too. The model may clear where nothing was recorded: a loop can
    clear by hand (`p.grad = None`), which no call shows.
    """

    def skeleton(calls: Sequence[str]) -> tuple[list[str], set[int]]:
        others: list[str] = []
        clears: set[int] = set()
        for call in calls:
            if call == "zero_grad":
                clears.add(len(others))
            else:
                others.append(call)
        return others, clears

    (recorded_calls, recorded_clears), (model_calls, model_clears) = map(
        skeleton, (recorded, model)
    )
    return recorded_calls == model_calls and recorded_clears <= model_clears


def same_numbers(a: CaseTrace, b: CaseTrace, ignored: frozenset[str] = TYPE_FIELDS) -> bool:
    """Do two runs of a case agree on every recorded number, some fields and the calls aside?"""

    def same(r: dict[str, Any] | None, s: dict[str, Any] | None) -> bool:
        if r is None or s is None:
            return r is s
        names = set(r) - ignored - {"calls"}
        return names == set(s) - ignored - {"calls"} and all(
            same_value(name, r[name], s[name]) for name in names
        )

    return (
        len(a.records) == len(b.records)
        and all(same(r, s) for r, s in zip(a.records, b.records, strict=True))
        and same(a.final, b.final)
    )


def _explains(exercise: Exercise, model: Traces, learner: Traces) -> bool:
    return all(
        same_numbers(model[spec.id], learner[spec.id])
        and agrees(call_stream(learner[spec.id]), call_stream(model[spec.id]))
        for spec in exercise.cases
    )


def diagnose(
    exercise: Exercise,
    traces: Traces,
    trusted: dict[str, Traces],
    checks: Sequence[Check],
) -> Verdict:
    """Name the learner's mistake from every explanation that fits their numbers and calls."""
    if all(c.passed for c in checks):
        return Verdict("correct", "")
    explanations = known_bugs(exercise, traces, trusted)
    explanations += MODELS[exercise.kind](exercise, traces)
    if not explanations and _right_but_returns_wrong_type(exercise, traces, trusted["reference"]):
        explanations.append(Explanation(("wrong-return-type",)))
    return verdict(explanations)


def known_bugs(exercise: Exercise, traces: Traces, trusted: dict[str, Traces]) -> list[Explanation]:
    """The declared buggy loops whose every value and call order the learner's agree with."""
    return [
        Explanation((variant.diagnosis,), variant.note)
        for variant in exercise.variants
        if all(trusted[variant.id][spec.id].error is None for spec in exercise.cases)
        and all(
            same_trace(traces[spec.id], trusted[variant.id][spec.id])
            and agrees(call_stream(traces[spec.id]), call_stream(trusted[variant.id][spec.id]))
            for spec in exercise.cases
        )
    ]


def _right_but_returns_wrong_type(exercise: Exercise, traces: Traces, reference: Traces) -> bool:
    type_field, wanted = JUDGES[exercise.kind].return_type
    returned = {
        record[type_field]
        for trace in traces.values()
        for record in [*trace.records, trace.final]
        if record is not None and type_field in record
    }
    return bool(returned - set(wanted)) and all(
        same_numbers(traces[spec.id], reference[spec.id], TYPE_FIELDS | RETURN_FIELDS)
        for spec in exercise.cases
    )


def verdict(explanations: Sequence[Explanation]) -> Verdict:
    """One diagnosis from the explanations that fit: the first, and the others said too."""
    by_code: dict[Diagnosis, Explanation] = {}
    for explanation in explanations:
        by_code.setdefault(explanation.codes[0], explanation)
    if len(by_code) > 1:
        by_code.pop("incorrect", None)  # a declared look-alike that names nothing
    if not by_code:
        return Verdict("incorrect", "")
    main, *others = by_code.values()
    parts = [main.note] if main.note else []
    for code in main.codes[1:]:
        parts.append(f"Your loop makes a second mistake as well (`{code}`): {EXPLANATIONS[code]}")
    for other in others:
        parts.append(
            "Another explanation fits your numbers and your calls just as well "
            f"(`{other.codes[0]}`): {other.note or EXPLANATIONS[other.codes[0]]}"
        )
    return Verdict(main.codes[0], "\n\n".join(parts), tuple(o.codes[0] for o in others))


# --- the kinds that step: the learner's calls replayed ------------------------------------------


@dataclass(frozen=True)
class _Attempt:
    """How a model did: `unexplained` is the first case it got wrong, with its trajectory there
    (None when the calls could not be replayed); both None when it explained every case."""

    unexplained: CaseSpec | None = None
    trajectory: CaseTrace | None = None


def _attempt(
    exercise: Exercise,
    traces: Traces,
    forward: Forward,
    numbers: Numbers,
    first: CaseSpec | None = None,
) -> _Attempt:
    """Replay case by case, `first` first, and stop at the first case the model gets wrong."""
    specs = sorted(exercise.cases, key=lambda spec: spec != first)
    for spec in specs:
        model = replay(exercise.kind, spec, traces[spec.id], forward, numbers)
        if model is None:
            return _Attempt(spec)
        learner = traces[spec.id]
        if not (same_numbers(model, learner) and agrees(call_stream(learner), call_stream(model))):
            return _Attempt(spec, model)
    return _Attempt()


def _iterations(exercise: Exercise, spec: CaseSpec) -> int:
    return spec.epochs * spec.steps if exercise.kind == "whole-loop" else spec.steps


def order_mistakes(
    exercise: Exercise, spec: CaseSpec, calls: Sequence[str], stepped_by_hand: bool
) -> list[Diagnosis]:
    """The mistakes a replayed loop's order of calls makes in one case, in the lesson's order.

    Called only once the replay of exactly these calls has explained the learner's numbers, so
    each name read here is borne out by them. A step's segment is everything since the previous
    step: it should clear, then run backward (once per micro-batch), then step.
    """
    iterations, micro = _iterations(exercise, spec), spec.micro_batches
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
        if micro > 1 and steps == backwards == iterations * micro:
            found.append("step-per-microbatch")
        elif steps > iterations:
            found.append("step-twice")
        elif steps < iterations:
            found.append("step-skipped")
    per_step = iterations * (micro or 1)  # backward calls a right loop makes
    if backwards >= 2 * per_step and backwards % per_step == 0:
        found.append("backward-twice")
    return sorted(set(found), key=PRIORITY.index)


def _order_note(exercise: Exercise, traces: Traces, codes: Sequence[Diagnosis]) -> str:
    """Where, in the first visible case, the calls show the main mistake."""
    visible = next((s for s in exercise.cases if not s.hidden), None)
    if visible is None or exercise.kind == "whole-loop" or not codes:
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


def _candidates(
    traces: Traces, spec: CaseSpec, model: CaseTrace, numbers: Numbers, momentum: bool
) -> list[tuple[Numbers, Diagnosis, str]]:
    """Models one number away from `numbers`, fitted on the first case those do not explain."""
    if not traces[spec.id].records or not model.records:
        return []
    mine, theirs = traces[spec.id].records[0], model.records[0]
    start = case_data(spec).weight
    moved = _ratio(as_tensor(mine["weight"]) - start, as_tensor(theirs["weight"]) - start)
    grad_ratio = _ratio(_tensor(mine["weight_grad"]), _tensor(theirs["weight_grad"]))
    scale = grad_ratio if grad_ratio is not None else moved
    found: list[tuple[Numbers, Diagnosis, str]] = []
    if scale is not None and scale > 0 and not _near(scale, 1):
        for family, code in SCALES:
            if _near(family(spec), scale):
                for scaled in (False, True):
                    found.append(
                        (replace(numbers, grad_scale=family, loss_scaled=scaled), code, "")
                    )
        k = _snap(scale)
        note = f"Your gradients are exactly {k:.4g} times the correct ones."
        for scaled in (False, True):
            found.append(
                (
                    replace(numbers, grad_scale=_constant(k), loss_scaled=scaled),
                    "gradients-scaled",
                    note,
                )
            )
    if moved is not None and moved > 0 and not _near(moved, 1):
        ratio = _snap(moved)
        found.append(
            (
                replace(numbers, lr=_lr_times(ratio)),
                "wrong-learning-rate",
                f"Your updates are {ratio:.4g} times the size a step of the optimizer makes.",
            )
        )
        value = moved * spec.lr
        found.append(
            (
                replace(numbers, lr=_constant(value)),
                "wrong-learning-rate",
                f"Your updates use a learning rate of {value:.4g} in every case, not the "
                "optimizer's.",
            )
        )
    if momentum:
        found.append((replace(numbers, momentum=_constant(0.0)), "wrong-momentum", ""))
    found.append((replace(numbers, loss_after_update=True), "loss-after-update", ""))
    return found


def stepping_models(exercise: Exercise, traces: Traces) -> list[Explanation]:
    """Replays of the learner's calls that explain their trajectory, and the mistakes they make.

    First the calls as recorded with the optimizer's numbers; then with one number fitted (a
    gradient scale, a learning rate, a momentum, the loss read after the update). A loop that
    recorded no step at all may have updated the weights by hand: that is tried last.
    """
    stepless = not any("step" in call_stream(trace) for trace in traces.values())
    for by_hand in (False, True) if stepless else (False,):
        for forward in Forward:
            found = _replayed_models(exercise, traces, forward, by_hand)
            if found:
                return found
    return []


def _replayed_models(
    exercise: Exercise, traces: Traces, forward: Forward, by_hand: bool
) -> list[Explanation]:
    momentum = any(spec.momentum for spec in exercise.cases)
    numbers = Numbers(update_by_hand=by_hand)
    order = _merged_order_mistakes(exercise, traces, by_hand)
    extra: tuple[Diagnosis, ...] = ("wrong-momentum",) if by_hand and momentum else ()
    base = _attempt(exercise, traces, forward, numbers)
    if base.unexplained is None:
        codes = tuple(order) + extra
        return [Explanation(codes, _order_note(exercise, traces, codes))] if codes else []
    if base.trajectory is None:
        return []  # these calls cannot be replayed as a loop of this kind
    found = []
    for candidate, code, note in _candidates(
        traces, base.unexplained, base.trajectory, numbers, momentum
    ):
        if _attempt(exercise, traces, forward, candidate, base.unexplained).unexplained:
            continue
        codes = (code, *order, *[e for e in extra if e != code])
        found.append(Explanation(tuple(sorted(set(codes), key=PRIORITY.index)), note))
    return found


def _merged_order_mistakes(exercise: Exercise, traces: Traces, by_hand: bool) -> list[Diagnosis]:
    found = {
        code
        for spec in exercise.cases
        for code in order_mistakes(exercise, spec, call_stream(traces[spec.id]), by_hand)
    }
    return sorted(found, key=PRIORITY.index)


# --- the kinds that only read --------------------------------------------------------------------


def demonstration_models(exercise: Exercise, traces: Traces) -> list[Explanation]:
    """accumulation_demo: returned tensors that are the live `.grad`, or passes cleared between.

    Each model predicts the two returned tensors from the case's one-pass gradient g (computed
    here): the reference returns copies g and 2g; a live `.grad` returned is 2g and reads zero
    once the harness clears `.grad`; clearing between the passes returns g and g.
    """
    aliased, cleared_between = True, True
    any_alias = False
    for spec in exercise.cases:
        record = traces[spec.id].records[0]
        data = case_data(spec)
        _, fresh, _ = loss_and_gradients(data.weight, data.bias, *batch_of(data.inputs[0]))
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
    found = []
    if aliased and any_alias:
        found.append(Explanation(("returns-live-gradient",)))
    if cleared_between:
        found.append(Explanation(("cleared-between-passes",)))
    return found


def magnitude_models(exercise: Exercise, traces: Traces) -> list[Explanation]:
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
            for name in ("weight_grad", "bias_grad")
        )
    codes: list[Diagnosis] = [] if all_right else ["missing-abs"]
    if changed:
        codes.append("modifies-gradients")
    return [Explanation(tuple(codes))] if codes else []


def _near_value(value: float, expected: float) -> bool:
    return close(torch.tensor([value]), torch.tensor([expected]))


MODELS: dict[Kind, Callable[[Exercise, Traces], list[Explanation]]] = {
    "train-step": stepping_models,
    "accumulate-microbatches": stepping_models,
    "whole-loop": stepping_models,
    "accumulation-demo": demonstration_models,
    "grad-magnitude": magnitude_models,
}
