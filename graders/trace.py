"""The schema of what the harness sends back. It comes from the sandbox: untrusted data.

Parsing is the only thing done to it: size was capped by the sandbox, shape and types are
checked here, and nothing in it is ever executed or believed beyond its numbers.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from graders.exercises import CaseSpec

ShortText = Annotated[str, Field(max_length=4000)]
Matrix = Annotated[list[Annotated[list[float], Field(max_length=64)]], Field(max_length=64)]
Vector = Annotated[list[float], Field(max_length=64)]
Call = Literal["zero_grad", "backward", "step"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StepRecord(_Strict):
    """The state after one call of the learner's function."""

    weight: Matrix
    bias: Vector
    weight_grad: Matrix | None
    bias_grad: Vector | None
    momentum: Matrix | None
    loss: float | None
    loss_type: Annotated[str, Field(max_length=100)]
    calls: Annotated[list[Call], Field(max_length=100)]


class ErrorRecord(_Strict):
    """An exception the learner's code raised."""

    type: Annotated[str, Field(max_length=200)]
    message: ShortText
    line: int | None
    traceback: ShortText
    grad_none: bool


class CaseTrace(_Strict):
    case: Annotated[str, Field(max_length=100)]
    steps: Annotated[list[StepRecord], Field(max_length=50)]
    error: ErrorRecord | None


class Ran(_Strict):
    status: Literal["ran"]
    cases: Annotated[list[CaseTrace], Field(max_length=50)]


class SyntaxErrorTrace(_Strict):
    status: Literal["syntax-error"]
    line: int | None
    message: ShortText
    text: ShortText


class MissingFunction(_Strict):
    status: Literal["missing-function"]


class LoadError(_Strict):
    status: Literal["load-error"]
    error: ErrorRecord


class Trace(BaseModel):
    """The whole payload, one of four shapes told apart by `status`."""

    root: Annotated[
        Ran | SyntaxErrorTrace | MissingFunction | LoadError, Field(discriminator="status")
    ]


class InvalidTrace(ValueError):
    """The payload is not a trace of these cases: the run did not finish as the harness would."""


def parse_trace(
    payload: bytes, specs: list[CaseSpec]
) -> Ran | SyntaxErrorTrace | MissingFunction | LoadError:
    """Parse and validate a payload against the cases that were asked for."""
    try:
        document = json.loads(payload)
        trace = Trace.model_validate({"root": document}).root
    except (ValueError, RecursionError, ValidationError) as exc:
        raise InvalidTrace(f"unreadable payload: {str(exc)[:200]}") from None
    if isinstance(trace, Ran):
        _check_shapes(trace, specs)
    return trace


def _check_shapes(trace: Ran, specs: list[CaseSpec]) -> None:
    if [c.case for c in trace.cases] != [s.id for s in specs]:
        raise InvalidTrace("the cases in the payload are not the cases that were run")
    for case, spec in zip(trace.cases, specs, strict=True):
        expected_steps = spec.steps if case.error is None else None
        if expected_steps is not None and len(case.steps) != expected_steps:
            raise InvalidTrace(f"case {spec.id}: {len(case.steps)} steps instead of {spec.steps}")
        for step in case.steps:
            matrices = [step.weight] + [
                m for m in (step.weight_grad, step.momentum) if m is not None
            ]
            vectors = [step.bias] + ([step.bias_grad] if step.bias_grad is not None else [])
            if any(
                len(m) != spec.out_features or any(len(r) != spec.in_features for r in m)
                for m in matrices
            ):
                raise InvalidTrace(f"case {spec.id}: a weight has the wrong shape")
            if any(len(v) != spec.out_features for v in vectors):
                raise InvalidTrace(f"case {spec.id}: a bias has the wrong shape")
