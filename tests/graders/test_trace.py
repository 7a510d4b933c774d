"""The trace is untrusted: anything malformed, oversized or off-shape is refused, not believed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from graders.exercises import CaseSpec, get_exercise
from graders.trace import InvalidTrace, Ran, parse_trace

SPECS = [c for c in get_exercise("train-step").cases if not c.hidden]


def record(spec: CaseSpec, **changes: Any) -> dict[str, Any]:
    values = {
        "weight": [[0.0] * spec.in_features for _ in range(spec.out_features)],
        "bias": [0.0] * spec.out_features,
        "weight_grad": None,
        "bias_grad": None,
        "momentum": None,
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
    trace = parse_trace(payload(), "train-step", SPECS)
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
        parse_trace(raw, "train-step", SPECS)


def test_missing_cases_are_refused() -> None:
    with pytest.raises(InvalidTrace, match="cases"):
        parse_trace(b'{"status": "ran", "cases": []}', "train-step", SPECS)


def test_too_few_records_are_refused() -> None:
    document = json.loads(payload())
    document["cases"][0]["records"].pop()
    with pytest.raises(InvalidTrace, match="records"):
        parse_trace(json.dumps(document).encode(), "train-step", SPECS)


def test_a_weight_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(InvalidTrace, match="weight"):
        parse_trace(payload(weight=[[0.0]]), "train-step", SPECS)


def test_an_unknown_call_name_is_refused() -> None:
    with pytest.raises(InvalidTrace, match="calls"):
        parse_trace(payload(calls=["zero_grad", "grade_me_full_marks"]), "train-step", SPECS)


def test_an_extra_field_in_a_record_is_refused() -> None:
    with pytest.raises(InvalidTrace, match="fields"):
        parse_trace(payload(passed=True), "train-step", SPECS)


def test_wrong_types_are_refused() -> None:
    with pytest.raises(InvalidTrace, match="loss"):
        parse_trace(payload(loss="ten"), "train-step", SPECS)
