"""Models of what a stepping loop did: the learner's own recorded calls, replayed here as a loop.

A model is a trusted loop built from the order of zero_grad / backward / step that the learner's
code recorded in a case, from where its forward pass ran (the order does not say), and from the
few numbers a loop can get wrong: a gradient scale, a learning rate, a momentum, when the loss
is read. It runs through the same harness as the reference, outside the sandbox, so its
trajectory is what the learner's would be if the model were what their code did. The caller
(`graders.diagnosis`) compares the two and names the mistakes of the models that explain it.

Serves the kinds that step, each by the `Replay` it declares: a function called once per step
(`PER_CALL`: one record per call) or one call that runs the whole loop (`WHOLE_LOOP`: one record
per optimizer step; iterations are found by counting backward calls).
"""

from __future__ import annotations

import enum
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from graders import harness
from graders.exercises import CaseSpec
from graders.judging import call_stream
from graders.trace import CaseTrace

PerCase = Callable[[CaseSpec], float]
MODEL_FILENAME = "model.py"


class Forward(enum.Enum):
    """Where the replayed loop runs its forward pass: the recorded calls do not show it."""

    AT_START = "at-start"  # first thing in the call (or right after the previous iteration)
    BEFORE_BACKWARD = "before-backward"  # right before the backward() that uses it


def unchanged_scale(spec: CaseSpec) -> float:
    return 1.0


def optimizer_lr(spec: CaseSpec) -> float:
    return spec.lr


def optimizer_momentum(spec: CaseSpec) -> float:
    return spec.momentum


@dataclass(frozen=True)
class Numbers:
    """The numbers a model's loop uses in a case: the optimizer's, unless the learner's differ.

    `update_by_hand`: the loop made no optimizer.step() but changed the weights itself, as
    plain SGD (`p -= lr * p.grad`, no momentum) after each iteration's last backward().
    """

    grad_scale: PerCase = unchanged_scale
    lr: PerCase = optimizer_lr
    momentum: PerCase = optimizer_momentum
    loss_scaled: bool = False  # the reported loss is the scaled one
    times_loss: bool = False  # gradients multiplied by the loss (`loss.backward(loss)`)
    loss_after_update: bool = False
    update_by_hand: bool = False
    # Each call's step is a new optimizer's first: its state (Adam's running averages and step
    # count) dropped before it and after it, as an optimizer built in every call starts with
    # none and leaves the given one with none.
    fresh_state: bool = False


class Unexplained(Exception):
    """The recorded calls cannot be replayed as a loop of this kind."""


@dataclass
class _Loop:
    """The state of one replayed call or iteration: what it runs on and what it reports."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[..., torch.Tensor]
    numbers: Numbers
    spec: CaseSpec

    def configure(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.numbers.lr(self.spec)
            group["momentum"] = self.numbers.momentum(self.spec)

    def loss_of(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """The mean loss of equal-size batches: their concatenation's loss."""
        total = sum((self.loss_fn(self.model(x), y) for x, y in batches), torch.zeros(()))
        return total / len(batches)

    def backward(self, loss: torch.Tensor, weight: float) -> None:
        scaled = loss * weight * self.numbers.grad_scale(self.spec)
        if self.numbers.times_loss:
            scaled = scaled * loss.detach()
        scaled.backward()  # type: ignore[no-untyped-call]

    def update_by_hand(self) -> None:
        with torch.no_grad():
            for parameter in self.model.parameters():
                if parameter.grad is not None:
                    parameter.sub_(self.numbers.lr(self.spec) * parameter.grad)

    def reported(self, losses: Sequence[torch.Tensor], given: Sequence[Any]) -> float:
        if self.numbers.loss_after_update or not losses:
            with torch.no_grad():
                value = float(self.loss_of(given))
        else:
            value = float(sum(loss.item() for loss in losses) / len(losses))
        return value * (self.numbers.grad_scale(self.spec) if self.numbers.loss_scaled else 1.0)


def _run_call(loop: _Loop, ops: Sequence[str], micro: list[Any], forward: Forward) -> float:
    """One call of a stepping function: the recorded ops, on one batch or its micro-batches."""
    loop.configure()
    backwards = ops.count("backward")
    if backwards and backwards % len(micro) == 0:
        groups, weight = [[micro[j % len(micro)]] for j in range(backwards)], 1 / len(micro)
    elif backwards == 1:
        groups, weight = [micro], 1.0  # one backward() on the mean of all micro-batches
    elif backwards == 0:
        groups, weight = [], 1.0
    else:
        raise Unexplained(f"{backwards} backward calls on {len(micro)} micro-batches")
    pending = [loop.loss_of(group) for group in groups] if forward is Forward.AT_START else []
    losses: list[torch.Tensor] = []
    for op in ops:
        if op == "zero_grad":
            loop.optimizer.zero_grad()
        elif op == "step":
            if loop.numbers.fresh_state:
                loop.optimizer.state.clear()
            loop.optimizer.step()
            if loop.numbers.fresh_state:
                loop.optimizer.state.clear()
        else:
            index = len(losses)
            losses.append(pending[index] if pending else loop.loss_of(groups[index]))
            loop.backward(losses[-1], weight)
            if loop.spec.max_norm is not None:  # a case that clips: the loop clips as it should
                torch.nn.utils.clip_grad_norm_(loop.model.parameters(), loop.spec.max_norm)
    if loop.numbers.update_by_hand:
        loop.update_by_hand()
    first_pass = len(micro) if len(groups) > 1 else 1
    return loop.reported(losses[:first_pass], micro)


def _stepping_function(
    per_call: Sequence[Sequence[str]], forward: Forward, numbers: Numbers, spec: CaseSpec
) -> Callable[..., float]:
    calls = iter(per_call)

    def step_function(
        model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Any, *given: Any
    ) -> float:
        micro = list(given[0]) if len(given) == 1 else [(given[0], given[1])]
        loop = _Loop(model, optimizer, loss_fn, numbers, spec)
        return _run_call(loop, next(calls), micro, forward)

    return step_function


def _whole_loop_function(
    stream: Sequence[str], forward: Forward, numbers: Numbers, spec: CaseSpec
) -> Callable[..., list[float]]:
    def train(
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Any,
        batches: list[Any],
        epochs: int,
    ) -> list[float]:
        loop = _Loop(model, optimizer, loss_fn, numbers, spec)
        loop.configure()
        iterations = epochs * len(batches)
        # Iterations are counted by their backward calls, or by their steps when none ran.
        anchor = "backward" if "backward" in stream else "step"
        anchors = stream.count(anchor)
        if not iterations or not anchors or anchors % iterations:
            raise Unexplained(f"{anchors} {anchor} calls in {iterations} iterations")
        per_iteration = anchors // iterations
        reported: list[float] = []
        losses: list[torch.Tensor] = []
        pending: list[torch.Tensor] = []

        def batch(iteration: int) -> list[Any]:
            return [batches[iteration % len(batches)]]

        def start(iteration: int) -> None:
            if forward is Forward.AT_START:
                pending[:] = [loop.loss_of(batch(iteration)) for _ in range(per_iteration)]

        def finish(iteration: int) -> None:
            reported.append(loop.reported(losses[:1], batch(iteration)))
            losses.clear()

        start(0)
        seen = 0
        for op in stream:
            if op == anchor:
                iteration = seen // per_iteration
                if seen % per_iteration == 0 and iteration and loop.numbers.loss_after_update:
                    finish(iteration - 1)
                loss = pending.pop(0) if pending else loop.loss_of(batch(iteration))
                if anchor == "backward":
                    losses.append(loss)
                    loop.backward(loss, 1.0)
                else:
                    losses.append(loss.detach())
                    optimizer.step()
                seen += 1
                if seen % per_iteration == 0:
                    if loop.numbers.update_by_hand:
                        loop.update_by_hand()
                    if not loop.numbers.loss_after_update:
                        finish(iteration)
                    if seen < anchors:
                        start(iteration + 1)
            elif op == "zero_grad":
                optimizer.zero_grad()
            else:
                optimizer.step()
        if loop.numbers.loss_after_update:
            finish(iterations - 1)
        return reported

    return train


def per_call_calls(trace: CaseTrace) -> list[list[str]]:
    """The calls each call of a stepping function made, as recorded."""
    return [list(record.get("calls", [])) for record in trace.records]


def _per_call_replay(
    learner: CaseTrace, forward: Forward, numbers: Numbers, spec: CaseSpec
) -> Callable[..., Any]:
    return _stepping_function(per_call_calls(learner), forward, numbers, spec)


def _whole_loop_replay(
    learner: CaseTrace, forward: Forward, numbers: Numbers, spec: CaseSpec
) -> Callable[..., Any]:
    return _whole_loop_function(call_stream(learner), forward, numbers, spec)


@dataclass(frozen=True)
class Replay:
    """How a stepping kind's recorded calls become a trusted loop, and how many iterations (one
    zero, backward, step each) a right loop makes in a case. `per_call`: each record is one call
    of the learner's function, so a note may point at the call where a mistake shows."""

    function: Callable[[CaseTrace, Forward, Numbers, CaseSpec], Callable[..., Any]]
    iterations: Callable[[CaseSpec], int]
    per_call: bool


def _steps(spec: CaseSpec) -> int:
    return spec.steps


def _epochs_of_steps(spec: CaseSpec) -> int:
    return spec.epochs * spec.steps


PER_CALL = Replay(function=_per_call_replay, iterations=_steps, per_call=True)
WHOLE_LOOP = Replay(function=_whole_loop_replay, iterations=_epochs_of_steps, per_call=False)


# A model's trajectory is a function of its case, its calls, where its forward runs and its
# numbers alone, and many learners' loops make the same calls (those of a right loop, or of a
# common mistake): diagnosing them and replaying their fix ask for the same models again. The
# models with the optimizer's numbers are kept (a fitted number is one learner's), as JSON, so
# that each caller gets its own copy; so many of them, the least recently used dropped.
REPLAYS_CACHED = 1024
_UNFITTED = (unchanged_scale, optimizer_lr, optimizer_momentum)
_replays: OrderedDict[tuple[object, ...], str | None] = OrderedDict()
_replays_lock = threading.Lock()


def replay(
    record: harness.Recorder,
    loop: Replay,
    spec: CaseSpec,
    learner: CaseTrace,
    forward: Forward,
    numbers: Numbers,
) -> CaseTrace | None:
    """The trajectory of the model in one case; None when the calls cannot be replayed."""
    if (numbers.grad_scale, numbers.lr, numbers.momentum) != _UNFITTED:
        document = _replayed(record, loop, spec, learner, forward, numbers)
        return None if document is None else CaseTrace.model_validate(document)
    calls = [[r.get("calls", []) for r in learner.records], (learner.final or {}).get("calls")]
    key = (record, loop, spec.model_dump_json(), json.dumps(calls), forward, numbers)
    with _replays_lock:
        found = _replays.get(key, "")
        if found != "":
            _replays.move_to_end(key)
    if found == "":
        document = _replayed(record, loop, spec, learner, forward, numbers)
        found = None if document is None else json.dumps(document)
        with _replays_lock:
            _replays[key] = found
            while len(_replays) > REPLAYS_CACHED:
                _replays.popitem(last=False)
    return None if found is None else CaseTrace.model_validate(json.loads(found))


def _replayed(
    record: harness.Recorder,
    loop: Replay,
    spec: CaseSpec,
    learner: CaseTrace,
    forward: Forward,
    numbers: Numbers,
) -> dict[str, Any] | None:
    """The harness's document of the model's run (JSON-ready), None when it failed."""
    function = loop.function(learner, forward, numbers, spec)
    document = harness.run_case(
        record, function, spec.harness_spec(), MODEL_FILENAME, watched=False
    )
    return None if document["error"] is not None else document
