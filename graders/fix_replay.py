"""The fix, replayed: the learner's loop with only its named mistake corrected, on their chart.

For a mistake the replay models (`graders.replay`), the learner's own recorded calls are changed
where the mistake is and nothing else (`optimizer.zero_grad()` put before `backward()`, say), or
the one number the mistake is about is set back to the optimizer's; that loop is replayed here
on a visible case and its values become one more line of that case's charts.

Never from a hidden case: only visible cases are replayed and charted, and a fix never uses a
number fitted to the learner's (a number a hidden case may have fitted). A change of the calls
is replayed only once the learner's calls with the optimizer's numbers are seen to reproduce
their visible values: else the loop has a second mistake whose number is unknown here, and no
line is drawn rather than a wrong one.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence

from graders.exercise import CaseSpec, Exercise
from graders.explanation import same_numbers
from graders.fitting import MAX_CALLS_PER_ITERATION, order_mistakes
from graders.judging import call_stream, same_trace, within_tolerance
from graders.kind import ExerciseKind
from graders.replay import Forward, Numbers, replay
from graders.report import Diagnosis, PlotSeries
from graders.trace import CaseTrace

log = logging.getLogger(__name__)

Calls = list[str]
# One iteration of a loop: the calls before its first backward(), from its first backward() to
# its last (its micro-batches), and after.
Iteration = tuple[Calls, Calls, Calls]
Fix = Callable[[Iteration, int], Iteration]

ZERO, BACKWARD, STEP = "zero_grad", "backward", "step"


def _without(calls: Calls, op: str) -> Calls:
    return [call for call in calls if call != op]


def _clear_first(it: Iteration, micro: int) -> Iteration:
    before, group, after = it
    return (before if ZERO in before else [*before, ZERO]), group, after


def _clear_before_backward(it: Iteration, micro: int) -> Iteration:
    """The clear that ran between backward() and step() runs before backward() instead."""
    before, group, after = it
    first_step = after.index(STEP) if STEP in after else len(after)
    moved = ZERO in after[:first_step]
    after = _without(after[:first_step], ZERO) + after[first_step:]
    return _clear_first((before, group, after), micro) if moved else (before, group, after)


def _clear_once(it: Iteration, micro: int) -> Iteration:
    before, group, after = it
    return before, _without(group, ZERO), after


def _step_after_backward(it: Iteration, micro: int) -> Iteration:
    before, group, after = it
    steps = before.count(STEP)
    return _without(before, STEP), group, [STEP] * steps + after


def _add_step(it: Iteration, micro: int) -> Iteration:
    before, group, after = it
    return (before, group, after) if STEP in before + after else (before, group, [STEP, *after])


def _one_step(it: Iteration, micro: int) -> Iteration:
    before, group, after = it
    if STEP not in after:
        return before, group, after
    first = after.index(STEP)
    return before, group, after[: first + 1] + _without(after[first + 1 :], STEP)


def _step_after_last_micro_batch(it: Iteration, micro: int) -> Iteration:
    before, group, after = it
    return _add_step((before, _without(group, STEP), after), micro)


def _one_backward_pass(it: Iteration, micro: int) -> Iteration:
    """The first pass over the micro-batches (or the batch) kept, the repeated ones dropped."""
    before, group, after = it
    positions = [i for i, call in enumerate(group) if call == BACKWARD]
    return before, group[: positions[micro - 1] + 1], after


# What each mistake's fix changes in every iteration, and what the chart's line is called, in
# the words of the learner's code. A mistake not listed has no single fix the replay models.
ORDER_FIXES: dict[Diagnosis, tuple[Fix, str]] = {
    "missing-zero-grad": (_clear_first, "your loop with optimizer.zero_grad() before backward()"),
    "zero-grad-skipped": (_clear_first, "your loop with optimizer.zero_grad() every step"),
    "zero-grad-before-step": (
        _clear_before_backward,
        "your loop with optimizer.zero_grad() moved before backward()",
    ),
    "zero-grad-inside-accumulation": (_clear_once, "your loop clearing once per step"),
    "step-before-backward": (
        _step_after_backward,
        "your loop with optimizer.step() after backward()",
    ),
    "missing-step": (_add_step, "your loop with optimizer.step() added"),
    "step-skipped": (_add_step, "your loop with optimizer.step() every step"),
    "step-twice": (_one_step, "your loop with one optimizer.step() per step"),
    "step-per-microbatch": (
        _step_after_last_micro_batch,
        "your loop stepping after the last micro-batch",
    ),
    "backward-twice": (_one_backward_pass, "your loop with one backward() per batch"),
}
ADDED_BACKWARD = "your loop with loss.backward() added"
# Mistakes of one number: the fix is the optimizer's number, the calls are the learner's own.
NUMBER_FIXES: dict[Diagnosis, str] = {
    "wrong-learning-rate": "your loop with the optimizer's learning rate",
    "wrong-momentum": "your loop with the optimizer's momentum",
    "gradients-scaled": "your loop with gradients not scaled",
    "loss-sum-not-mean": "your loop with the mean loss, not the sum",
    "loss-divided-by-batch": "your loop with the mean loss, not divided again",
    "wrong-loss-scaling": "your loop with the loss scaled as the lesson says",
    "loss-after-update": "your loop returning the loss before the update",
}


def fix_label(diagnosis: Diagnosis) -> str | None:
    """What the replayed fix of a mistake is called on the chart; None: no single fix."""
    if diagnosis == "missing-backward":
        return ADDED_BACKWARD
    if diagnosis in ORDER_FIXES:
        return ORDER_FIXES[diagnosis][1]
    return NUMBER_FIXES.get(diagnosis)


def _split(calls: Calls, iterations: int, step_starts: bool) -> list[Iteration] | None:
    """A stream of calls as `iterations` iterations, or None when its backward() calls are not
    a whole number per iteration.

    The calls between two iterations' backward() calls are shared at their last step (the step
    ends the iteration before), or, when `step_starts` (a loop that steps before backward()),
    at their first.
    """
    positions = [i for i, call in enumerate(calls) if call == BACKWARD]
    if not positions or iterations < 1 or len(positions) % iterations:
        return None
    per = len(positions) // iterations
    firsts = [positions[k * per] for k in range(iterations)]
    lasts = [positions[(k + 1) * per - 1] for k in range(iterations)]
    cuts = [0]
    for k in range(iterations - 1):
        gap = calls[lasts[k] + 1 : firsts[k + 1]]
        steps = [i for i, call in enumerate(gap) if call == STEP]
        cut = (steps[0] if step_starts else steps[-1] + 1) if steps else 0
        cuts.append(lasts[k] + 1 + cut)
    cuts.append(len(calls))
    return [
        (
            calls[cuts[k] : firsts[k]],
            calls[firsts[k] : lasts[k] + 1],
            calls[lasts[k] + 1 : cuts[k + 1]],
        )
        for k in range(iterations)
    ]


def fixed_calls(diagnosis: Diagnosis, calls: Calls, iterations: int, micro: int) -> Calls | None:
    """The calls of `iterations` iterations with the one mistake fixed in each; None when they
    cannot be read as that many iterations."""
    if diagnosis == "missing-backward":
        if BACKWARD in calls:
            return None
        return [
            new
            for call in calls
            for new in ([BACKWARD] * micro + [STEP] if call == STEP else [call])
        ]
    fix, _ = ORDER_FIXES[diagnosis]
    split = _split(calls, iterations, step_starts=diagnosis == "step-before-backward")
    if split is None:
        return None
    if diagnosis == "backward-twice" and any(g.count(BACKWARD) < micro for _, g, _ in split):
        return None
    return [call for it in split for part in fix(it, micro) for call in part]


def _with_calls(
    kind: ExerciseKind, spec: CaseSpec, trace: CaseTrace, diagnosis: Diagnosis
) -> CaseTrace | None:
    """The trace with its calls fixed: each call's own (a function called once per step), or the
    whole stream's (a whole loop, which the replay reads as one stream)."""
    assert kind.replay is not None
    micro = spec.micro_batches or 1
    if kind.replay.per_call:
        records = []
        for record in trace.records:
            calls = fixed_calls(diagnosis, list(record.get("calls", [])), 1, micro)
            if calls is None:
                return None
            records.append({**record, "calls": calls})
        return trace.model_copy(update={"records": records})
    calls = fixed_calls(diagnosis, call_stream(trace), kind.replay.iterations(spec), micro)
    if calls is None:
        return None
    final = {**(trace.final or {}), "calls": calls}
    return trace.model_copy(
        update={"records": [{**r, "calls": []} for r in trace.records], "final": final}
    )


def fixed_trajectory(
    kind: ExerciseKind, spec: CaseSpec, learner: CaseTrace, diagnosis: Diagnosis
) -> CaseTrace | None:
    """The learner's loop in one (visible) case with the one mistake fixed; None when the replay
    does not model the mistake or cannot tell what else the loop does."""
    loop = kind.replay
    if loop is None or fix_label(diagnosis) is None:
        return None
    micro = spec.micro_batches or 1
    stream = call_stream(learner)
    if STEP not in stream and diagnosis not in ("missing-step", "step-skipped"):
        return None  # an update by hand: the fix is the optimizer's step, not one line
    if len(stream) > MAX_CALLS_PER_ITERATION * loop.iterations(spec) * micro:
        return None  # far more calls than any loop the replay models: not replayed
    if diagnosis in NUMBER_FIXES:
        # The learner's own calls with the optimizer's numbers.
        forward = _body_forward(kind, spec, learner, diagnosis, reproduced=None)
        return (
            None
            if forward is None
            else replay(kind.record, loop, spec, learner, forward, Numbers())
        )
    fixed = _with_calls(kind, spec, learner, diagnosis)
    if fixed is None:
        return None
    # Only a loop the optimizer's numbers reproduce has this one mistake and no unknown number.
    # The first place that does is the one `_body_forward` reads: the others are not replayed.
    reproducing = (
        forward
        for forward in Forward
        if (model := replay(kind.record, loop, spec, learner, forward, Numbers())) is not None
        and same_numbers(model, learner)
    )
    reproduced = list(itertools.islice(reproducing, 1))
    forward = _body_forward(kind, spec, learner, diagnosis, reproduced)
    return None if forward is None else replay(kind.record, loop, spec, fixed, forward, Numbers())


def _body_forward(
    kind: ExerciseKind,
    spec: CaseSpec,
    learner: CaseTrace,
    diagnosis: Diagnosis,
    reproduced: list[Forward] | None,
) -> Forward | None:
    """Where the fixed loop's forward pass runs: where the learner's ran, which the calls do not
    show. `reproduced`: the first place that reproduces the learner's values, or none (None:
    not known, a number of theirs differs).

    A function called once per step runs it at the start of its call, or right before
    backward(): the first place that reproduces the learner's values (either, when both give
    the same fixed line). A whole loop's replay starts an iteration's forward right after the
    previous backward(), before that iteration's step; real loops run it at the top of the loop
    body, after the step, which is right before backward() once every step follows its
    backward(): the fixed loop's forward runs there, and a loop that steps before backward() is
    given no line unless stepping first is the mistake fixed.
    """
    assert kind.replay is not None
    if kind.replay.per_call:
        if reproduced is not None:
            return reproduced[0] if reproduced else None
        runs = [replay(kind.record, kind.replay, spec, learner, f, Numbers()) for f in Forward]
        first, last = runs[0], runs[-1]
        return Forward.AT_START if first and last and same_numbers(first, last) else None
    if reproduced is not None and not reproduced:
        return None
    if diagnosis != "step-before-backward" and "step-before-backward" in order_mistakes(
        kind, spec, call_stream(learner), stepped_by_hand=False
    ):
        return None
    return Forward.BEFORE_BACKWARD


def _same_line(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    return len(a) == len(b) and all(
        (u is None and v is None) or (u is not None and v is not None and within_tolerance(u, v))
        for u, v in zip(a, b, strict=True)
    )


def with_fix(
    kind: ExerciseKind,
    exercise: Exercise,
    traces: dict[str, CaseTrace],
    reference: dict[str, CaseTrace],
    diagnosis: Diagnosis,
    plots: Sequence[PlotSeries],
) -> list[PlotSeries]:
    """The charts, each with the replayed fix's line where the learner's differs from the
    reference's and the fix's from the learner's. Visible cases only."""
    label = fix_label(diagnosis)
    if label is None or kind.replay is None:
        return list(plots)
    shown: list[PlotSeries] = []
    fixed_plots: dict[str, list[PlotSeries]] = {}
    # A fix is replayed only for a case with a chart it could be drawn on (below).
    parted = {plot.case for plot in plots if not _same_line(plot.learner, plot.reference)}
    for spec in exercise.cases:
        if spec.hidden or spec.id not in parted or same_trace(traces[spec.id], reference[spec.id]):
            continue
        try:
            fixed = fixed_trajectory(kind, spec, traces[spec.id], diagnosis)
        except Exception:
            # The line is extra: a fault of this module costs the line, never the grade.
            log.exception("exercise=%s replaying the fix of %s failed", exercise.id, diagnosis)
            continue
        if fixed is not None:
            fixed_plots[spec.id] = kind.judge.plots(spec, fixed, reference[spec.id])
    for plot in plots:
        match = next((p for p in fixed_plots.get(plot.case, []) if p.label == plot.label), None)
        if (
            match is None
            or _same_line(plot.learner, plot.reference)
            or _same_line(match.learner, plot.learner)
        ):
            shown.append(plot)
        else:
            shown.append(plot.model_copy(update={"fixed": match.learner, "fixed_label": label}))
    return shown
