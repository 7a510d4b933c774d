"""The trace is untrusted: anything malformed, oversized or off-shape is refused, not believed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from graders.exercises import CaseSpec, get_exercise
from graders.kinds import step_function, training_loop
from graders.trace import (
    MAX_MAGNITUDE,
    InvalidTrace,
    NonFiniteValue,
    Ran,
    parse_trace,
    record_fields,
)

SPECS = [c for c in get_exercise("train-step").cases if not c.hidden]


def record(spec: CaseSpec, **changes: Any) -> dict[str, Any]:
    values = {
        "weight": [[0.0] * spec.in_features for _ in range(spec.out_features)],
        "bias": [0.0] * spec.out_features,
        "weight_grad": None,
        "bias_grad": None,
        "momentum": None,
        "exp_avg": None,
        "exp_avg_sq": None,
        "max_exp_avg_sq": None,
        "opt_step": None,
        "loss": 1.0,
        "loss_type": "float",
        "calls": ["zero_grad", "backward", "step"],
    }
    values.update(changes)
    return values


def payload(**changes: Any) -> bytes:
    cases = [
        {"case": s.id, "records": [record(s, **changes)] * s.steps, "final": None, "error": None}
        for s in SPECS
    ]
    return json.dumps({"status": "ran", "cases": cases}).encode()


def test_a_well_formed_trace_parses() -> None:
    trace = parse_trace(payload(), step_function.TRACE, SPECS)
    assert isinstance(trace, Ran)
    assert [c.case for c in trace.cases] == [s.id for s in SPECS]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"status": "passed", "score": 10}',
        b'{"status": "ran", "cases": [], "score": 10}',
    ],
    ids=["empty", "not-json", "deeply-nested", "unknown-status", "extra-field"],
)
def test_malformed_payloads_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidTrace):
        parse_trace(raw, step_function.TRACE, SPECS)


def test_missing_cases_are_refused() -> None:
    with pytest.raises(InvalidTrace, match="cases"):
        parse_trace(b'{"status": "ran", "cases": []}', step_function.TRACE, SPECS)


def test_too_few_records_are_refused() -> None:
    document = json.loads(payload())
    document["cases"][0]["records"].pop()
    with pytest.raises(InvalidTrace, match="records"):
        parse_trace(json.dumps(document).encode(), step_function.TRACE, SPECS)


def test_a_weight_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(InvalidTrace, match="weight"):
        parse_trace(payload(weight=[[0.0]]), step_function.TRACE, SPECS)


def test_an_unknown_call_name_is_refused() -> None:
    with pytest.raises(InvalidTrace, match="calls"):
        parse_trace(payload(calls=["zero_grad", "grade_me_full_marks"]), step_function.TRACE, SPECS)


def test_an_extra_field_in_a_record_is_refused() -> None:
    with pytest.raises(InvalidTrace, match="fields"):
        parse_trace(payload(passed=True), step_function.TRACE, SPECS)


def test_wrong_types_are_refused() -> None:
    with pytest.raises(InvalidTrace, match="loss"):
        parse_trace(payload(loss="ten"), step_function.TRACE, SPECS)


def test_numbers_become_floats_and_huge_ints_do_not_overflow() -> None:
    raw = payload().replace(b'"loss": 1.0', b'"loss": 1' + b"0" * 400)
    with pytest.raises(NonFiniteValue) as caught:
        parse_trace(raw, step_function.TRACE, SPECS)
    assert caught.value.where == "after call 1, `loss`"
    assert caught.value.value == float("inf")
    trace = parse_trace(payload(loss=2), step_function.TRACE, SPECS)
    assert isinstance(trace, Ran)
    assert type(trace.cases[0].records[0]["loss"]) is float


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), float("-inf"), 1e300, -2 * MAX_MAGNITUDE]
)
def test_a_non_finite_or_blown_up_number_is_named(value: float) -> None:
    document = json.loads(payload())
    case = document["cases"][1]
    case["records"][2] = {**case["records"][2], "weight": [[0.0, 0.0, 0.0], [0.0, 0.0, value]]}
    with pytest.raises(NonFiniteValue) as caught:
        parse_trace(json.dumps(document).encode(), step_function.TRACE, SPECS)
    assert caught.value.case == SPECS[1].id
    assert caught.value.where == "after call 3, `weight`"


def test_negative_zero_and_large_but_sane_numbers_are_values() -> None:
    for value in (-0.0, MAX_MAGNITUDE, -MAX_MAGNITUDE, 5e-324):
        trace = parse_trace(payload(loss=value), step_function.TRACE, SPECS)
        assert isinstance(trace, Ran)
        assert trace.cases[0].records[0]["loss"] == value


@pytest.mark.parametrize(
    "changes",
    [{"loss": True}, {"bias": [[0.0]]}, {"weight_grad": "nan"}, {"loss_type": "x" * 101}],
    ids=["bool", "nested-too-deep", "string-for-tensor", "long-type-name"],
)
def test_wrong_types_anywhere_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidTrace):
        parse_trace(payload(**changes), step_function.TRACE, SPECS)


def test_a_case_that_raised_may_not_bring_more_records_than_its_steps() -> None:
    document = json.loads(payload())
    case = document["cases"][0]
    case["records"] = case["records"] * 3
    case["error"] = {
        "type": "E",
        "message": "",
        "line": None,
        "traceback": "",
        "grad_none": False,
    }
    with pytest.raises(InvalidTrace, match="records"):
        parse_trace(json.dumps(document).encode(), step_function.TRACE, SPECS)


def test_a_whole_loop_may_record_a_bounded_number_of_steps() -> None:
    specs = [c for c in get_exercise("fix-the-loop").cases if not c.hidden][:1]
    spec = specs[0]
    limit = training_loop.record_limit(spec)
    fields = record_fields(training_loop.TRACE.record_fields, spec)
    step = {key: value for key, value in record(spec).items() if key in fields}
    final = {**step, "losses": [0.5] * spec.epochs * spec.steps, "losses_type": "list"}

    def loop(records: int, losses: int) -> bytes:
        case = {
            "case": spec.id,
            "records": [step] * records,
            "final": {**final, "losses": [0.5] * losses},
            "error": None,
        }
        return json.dumps({"status": "ran", "cases": [case]}).encode()

    assert isinstance(parse_trace(loop(limit, limit), training_loop.TRACE, specs), Ran)
    with pytest.raises(InvalidTrace, match="records"):
        parse_trace(loop(limit + 1, 1), training_loop.TRACE, specs)
    with pytest.raises(InvalidTrace, match="losses"):
        parse_trace(loop(1, limit + 1), training_loop.TRACE, specs)
