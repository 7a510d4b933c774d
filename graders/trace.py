"""The schema of what the harness sends back. It comes from the sandbox: untrusted data.

Parsing is the only thing done to it: size was capped by the sandbox, shape and types are
checked here against what the exercise kind records, and nothing in it is ever executed or
believed beyond its numbers.

What `parse_trace` guarantees to everything that judges a trace (graders/kinds, diagnosis):
- every case asked for is there, in order, with exactly the records its kind makes for it
  (or at most so many, as its `TraceShape` says), fewer only up to a case that raised;
- every record has exactly its kind's fields (its `TraceShape`), tensors with
  exactly the case's shapes, calls from `CALLS`, short type names;
- every number is a Python float, finite and within +-`MAX_MAGNITUDE` (ints are floats too).
A payload that breaks any of these raises InvalidTrace; one whose only fault is a NaN, an
infinity or a blown-up value raises its subclass NonFiniteValue, naming where: both are the
learner's failure, never the server's.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from graders import harness
from graders.exercises import CaseSpec

ShortText = Annotated[str, Field(max_length=4000)]
# Field by field, a record is checked against what its kind records (`check_cases`).
Record = Annotated[dict[Annotated[str, Field(max_length=40)], Any], Field(max_length=20)]
# Marks, not calls of a loop (graders.harness.BackwardWatch): `detached_backward`, a backward()
# whose gradient never reached the weight; `new_optimizer`, an optimizer the code made.
MARKS = ("detached_backward", "new_optimizer")
CALLS = ("zero_grad", "backward", "step", *MARKS)
# Far beyond anything an nn.Linear step on these cases reaches, and small enough that the
# grader's own float32 arithmetic on the learner's numbers (a loss at the learner's weights,
# a squared error) cannot overflow.
MAX_MAGNITUDE = 1e15

# What each field of a record holds: its type, and for tensors their shape.
#   matrix: out x in floats; vector: out floats; `?` allows None; number: a float or None;
#   text: a short string; calls: names from CALLS; numbers: a list of floats (or None);
#   tensor:2x3: nested lists of floats of that shape; first: one of the first parameter's shape;
#   parameters: a model's parameters flattened, as many as `TraceShape.parameter_count`.
# `NAMED_PARAMETERS` stands for every parameter of the case's declared model
# (`graders.harness.parameters_of`): one field a parameter (its name, a tensor of its shape) and
# one its gradient (`name_grad`).
NAMED = "named-parameters"
PARAMETERS = {"named_parameters": NAMED}


@functools.cache
def parameter_shapes(spec: CaseSpec) -> dict[str, tuple[int, ...]]:
    """The shape of each parameter of the case's model, by name."""
    model = harness.build_model(spec.harness_spec(), torch.Generator())
    return {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}


def record_fields(fields: dict[str, str], spec: CaseSpec) -> dict[str, str]:
    """A kind's record fields with `PARAMETERS` and `first` spelled out for this case's model."""
    if not any(kind == NAMED or kind.startswith("first") for kind in fields.values()):
        return fields
    shapes = {name: "tensor:" + "x".join(map(str, shape)) for name, shape in
              parameter_shapes(spec).items()}  # fmt: skip
    first = next(iter(shapes.values()))
    spelled = {
        name: first + kind[5:] if kind.startswith("first") else kind
        for name, kind in fields.items()
        if kind != NAMED
    }
    if NAMED not in fields.values():
        return spelled
    return spelled | shapes | {f"{name}_grad": f"{kind}?" for name, kind in shapes.items()}


@dataclass(frozen=True)
class TraceShape:
    """What a kind records for a case: each record's fields, the final record's (None when the
    kind makes none), and how many records a case makes (`exact`) or may make at most."""

    record_fields: dict[str, str]
    final_fields: dict[str, str] | None
    most_records: Callable[[CaseSpec], int]
    exact: bool = True
    # For a model beyond nn.Linear: how many numbers a `parameters` field holds (every
    # parameter flattened, `harness.flat_parameters`).
    parameter_count: Callable[[CaseSpec], int] | None = None


def one_record_per_case(spec: CaseSpec) -> int:
    """For kinds whose function is called once per case."""
    return 1


MAX_LOOP_RECORDS = 2000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ErrorRecord(_Strict):
    """An exception the learner's code raised."""

    type: Annotated[str, Field(max_length=200)]
    message: ShortText
    line: int | None
    traceback: ShortText
    grad_none: bool


class CaseTrace(_Strict):
    """What one case recorded: a record per call (or per optimizer step), and an error if any."""

    case: Annotated[str, Field(max_length=100)]
    records: Annotated[list[Record], Field(max_length=MAX_LOOP_RECORDS)]
    final: Record | None
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


AnyTrace = Ran | SyntaxErrorTrace | MissingFunction | LoadError


class Trace(BaseModel):
    """The whole payload, one of four shapes told apart by `status`."""

    root: Annotated[AnyTrace, Field(discriminator="status")]


class InvalidTrace(ValueError):
    """The payload is not a trace of these cases: the run did not finish as the harness would.

    The message says what is wrong, for logs and for a learner's visible case.
    """


class NonFiniteValue(InvalidTrace):
    """A well-formed trace holding a NaN, an infinity or a value beyond MAX_MAGNITUDE."""

    def __init__(self, case: str, where: str, value: float) -> None:
        super().__init__(f"case {case}: {where} is {value!r}")
        self.case = case
        self.where = where  # in the learner's terms: "after call 2, `loss`"
        self.value = value


def parse_trace(payload: bytes, shape: TraceShape, specs: list[CaseSpec]) -> AnyTrace:
    """Parse and validate a payload against the cases that were asked for.

    Raises InvalidTrace, or NonFiniteValue when a number is not finite or too large.
    """
    try:
        # Every JSON number becomes a float: 10**400 is then inf (and caught below) rather
        # than an int that overflows wherever it is used.
        document = json.loads(payload, parse_int=float)
        trace = Trace.model_validate({"root": document}).root
    except (ValueError, RecursionError, ValidationError) as exc:
        raise InvalidTrace(f"unreadable payload: {str(exc)[:200]}") from None
    if isinstance(trace, Ran):
        check_cases(trace, shape, specs)
    return trace


def check_cases(trace: Ran, shape: TraceShape, specs: list[CaseSpec]) -> None:
    """Raise InvalidTrace unless every case is there with the records its kind makes."""
    if [c.case for c in trace.cases] != [s.id for s in specs]:
        raise InvalidTrace("the cases in the payload are not the cases that were run")
    final_fields = shape.final_fields
    for case, spec in zip(trace.cases, specs, strict=True):
        most = shape.most_records(spec)
        if len(case.records) > most or (
            case.error is None and shape.exact and len(case.records) != most
        ):
            raise InvalidTrace(f"case {spec.id}: {len(case.records)} records, not {most}")
        if case.error is None and (final_fields is not None) != (case.final is not None):
            raise InvalidTrace(f"case {spec.id}: the final record is missing or unexpected")
        if case.final is not None and final_fields is None:
            raise InvalidTrace(f"case {spec.id}: a final record this kind does not make")
        for index, record in enumerate(case.records):
            _check_record(record, shape, shape.record_fields, spec, f"after call {index + 1}")
        if case.final is not None and final_fields is not None:
            _check_record(case.final, shape, final_fields, spec, "at the end")


def _check_record(
    record: dict[str, Any], shape: TraceShape, fields: dict[str, str], spec: CaseSpec, at: str
) -> None:
    fields = record_fields(fields, spec)
    if set(record) != set(fields):
        raise InvalidTrace(f"case {spec.id}: a record has fields {sorted(record)}")
    for name, kind in fields.items():
        if not _fits(record[name], kind, shape, spec):
            raise InvalidTrace(f"case {spec.id}: field {name} is not a {kind}")
    for name, kind in fields.items():
        if kind in ("text", "calls"):
            continue
        for value in _numbers_in(record[name]):
            if not (math.isfinite(value) and abs(value) <= MAX_MAGNITUDE):
                raise NonFiniteValue(spec.id, f"{at}, `{name}`", value)


def _numbers_in(value: Any) -> list[float]:
    if isinstance(value, list):
        return [number for item in value for number in _numbers_in(item)]
    return [] if value is None else [value]


def _is_float(value: Any) -> bool:
    return isinstance(value, float)


def _of_shape(value: Any, shape: list[int]) -> bool:
    if not shape:
        return _is_float(value)
    return (
        isinstance(value, list)
        and len(value) == shape[0]
        and all(_of_shape(item, shape[1:]) for item in value)
    )


def _fits(value: Any, kind: str, shape: TraceShape, spec: CaseSpec) -> bool:
    if kind.endswith("?"):
        return value is None or _fits(value, kind[:-1], shape, spec)
    if kind == "matrix":
        return (
            isinstance(value, list)
            and len(value) == spec.out_features
            and all(_fits(row, "row", shape, spec) for row in value)
        )
    if kind == "row":
        return (
            isinstance(value, list)
            and len(value) == spec.in_features
            and all(map(_is_float, value))
        )
    if kind == "vector":
        return (
            isinstance(value, list)
            and len(value) == spec.out_features
            and all(map(_is_float, value))
        )
    if kind.startswith("tensor:"):
        return _of_shape(value, [int(size) for size in kind[7:].split("x") if size])
    if kind == "parameters":
        return (
            shape.parameter_count is not None
            and isinstance(value, list)
            and len(value) == shape.parameter_count(spec)
            and all(map(_is_float, value))
        )
    if kind == "number":
        return value is None or _is_float(value)
    if kind == "text":
        return isinstance(value, str) and len(value) <= harness.MAX_TYPE_NAME_CHARS
    if kind == "calls":
        return (
            isinstance(value, list)
            and len(value) <= harness.MAX_CALLS_PER_RECORD
            and all(v in CALLS for v in value)
        )
    if kind == "numbers":
        return value is None or (
            isinstance(value, list)
            and len(value) <= shape.most_records(spec)
            and all(v is None or _is_float(v) for v in value)
        )
    raise AssertionError(f"unknown field kind {kind}")
