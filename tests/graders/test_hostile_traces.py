"""The trace is hostile data: random traces fed to the judges never raise, and a hostile value
never earns more than an honest 0.0 in its place would.

Traces start from the reference's own (so that they get past the first check) and are then
attacked where hypothesis chooses: NaN, infinities, ints too large for a float, huge and
negative-zero floats, wrong lengths, wrong types, missing and extra records. Everything goes
through grading.grade_runs, the path a sandbox's RunResult takes.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graders.exercise import Exercise
from graders.exercises import list_exercises
from graders.grading import GRADING_LIMITS, grade_runs, judge, trusted_trajectories
from graders.judging import within_tolerance
from graders.report import GradeReport
from tests.graders.sandbox_results import groups, harness_document, harness_result, result

EXERCISES = list_exercises()
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HOSTILE_NUMBERS = st.sampled_from(
    [math.nan, math.inf, -math.inf, 10**400, -(10**400), 1e300, -3e15, -0.0]
)
WRONG_VALUES = st.sampled_from(
    ["0.5", True, {"value": 1.0}, [], [[[0.0]]], [0.0] * 70, "NaN", [None], {"$ref": "x"}]
)
Path = tuple[Any, ...]


def reference_documents(exercise: Exercise) -> list[dict[str, Any]]:
    return [harness_document(exercise, exercise.solution_code, cases) for cases in groups(exercise)]


DOCUMENTS = {exercise.id: reference_documents(exercise) for exercise in EXERCISES}


def number_paths(value: Any, path: Path = ()) -> list[Path]:
    """Where the numbers are in a trace document (records and final records only)."""
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in number_paths(item, (*path, key))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in number_paths(item, (*path, i))]
    inside_records = "records" in path or "final" in path
    is_number = isinstance(value, float) and not isinstance(value, bool)
    return [path] if inside_records and is_number else []


def field_paths(document: dict[str, Any]) -> list[Path]:
    """Every field of every record and final record."""
    found: list[Path] = []
    for c, case in enumerate(document["cases"]):
        for r, record in enumerate(case["records"]):
            found += [("cases", c, "records", r, name) for name in record]
        if case["final"] is not None:
            found += [("cases", c, "final", name) for name in case["final"]]
    return found


def get(document: Any, path: Path) -> Any:
    for key in path:
        document = document[key]
    return document


def put(document: Any, path: Path, value: Any) -> None:
    get(document, path[:-1])[path[-1]] = value


def grade_documents(exercise: Exercise, documents: list[dict[str, Any]]) -> GradeReport:
    runs = [
        (cases, result(payload=json.dumps(document).encode()))
        for cases, document in zip(groups(exercise), documents, strict=True)
    ]
    return grade_runs(exercise, runs, GRADING_LIMITS)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
@SETTINGS
@given(data=st.data())
def test_a_hostile_number_earns_no_more_than_an_honest_zero(exercise: Exercise, data: Any) -> None:
    hostile = copy.deepcopy(DOCUMENTS[exercise.id])
    zeroed = copy.deepcopy(DOCUMENTS[exercise.id])
    group = data.draw(st.sampled_from(range(len(hostile))))
    paths = number_paths(hostile[group])
    chosen = data.draw(st.lists(st.sampled_from(paths), min_size=1, max_size=4, unique=True))
    for path in chosen:
        original = get(hostile[group], path)
        value = data.draw(HOSTILE_NUMBERS | st.floats(allow_nan=True, allow_infinity=True))
        if isinstance(value, float) and within_tolerance(value, original):
            value = math.nan  # a value that matches the reference is not an attack
        put(hostile[group], path, value)
        put(zeroed[group], path, 0.0)

    report = grade_documents(exercise, hostile)
    honest = grade_documents(exercise, zeroed)
    assert report.score <= honest.score, (chosen, report.checks)
    finite = all(
        isinstance(v := get(hostile[group], p), float) and math.isfinite(v) and abs(v) <= 1e15
        for p in chosen
    )
    if not finite:
        assert report.diagnosis == "non-finite-value"
        assert report.score == 0


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
@SETTINGS
@given(data=st.data())
def test_a_trace_of_the_wrong_shape_is_the_learners_failure(exercise: Exercise, data: Any) -> None:
    documents = copy.deepcopy(DOCUMENTS[exercise.id])
    group = data.draw(st.sampled_from(range(len(documents))))
    document = documents[group]
    attack = data.draw(st.sampled_from(["value", "drop record", "extra record", "extra field"]))
    case = data.draw(st.sampled_from(document["cases"]))
    if attack == "value":
        put(document, data.draw(st.sampled_from(field_paths(document))), data.draw(WRONG_VALUES))
    elif attack == "drop record" and case["records"]:
        case["records"].pop(data.draw(st.integers(0, len(case["records"]) - 1)))
    elif attack == "extra record":
        case["records"] += case["records"][:1] * data.draw(st.integers(1, 5000))
    elif attack == "extra field" and case["records"]:
        case["records"][0]["score"] = 10

    report = grade_documents(exercise, documents)  # never raises
    honest = grade_documents(exercise, DOCUMENTS[exercise.id])
    assert honest.score == exercise.max_score
    assert report.score <= honest.score
    if report.diagnosis == "runtime-error":
        assert report.score == 0


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
@SETTINGS
@given(
    payload=st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
        ),
        max_leaves=40,
    )
)
def test_any_json_at_all_is_graded_zero_never_an_error(exercise: Exercise, payload: Any) -> None:
    documents = [payload, DOCUMENTS[exercise.id][1]]
    report = grade_documents(exercise, documents)
    assert report.score == 0


ODD_RETURNS = {
    "an int too large for a float": ("return 10**400", "non-finite-value"),
    "a complex tensor": ("return torch.tensor(1 + 2j)", "wrong-return-type"),
    "a type with a 300-character name": ("return type('T' * 300, (), {})()", "wrong-return-type"),
    "an exception whose message cannot be read": (
        "raise type('Sly', (Exception,), {'__str__': lambda self: 1 / 0})()",
        "runtime-error",
    ),
}


@pytest.mark.parametrize("name", sorted(ODD_RETURNS))
def test_the_harness_records_odd_results_as_the_learners(name: str) -> None:
    statement, diagnosis = ODD_RETURNS[name]
    exercise = next(e for e in EXERCISES if e.id == "train-step")
    source = (
        "import torch\n\n"
        "def train_step(model, optimizer, loss_fn, x, y):\n"
        "    optimizer.zero_grad()\n"
        "    loss_fn(model(x), y).backward()\n"
        "    optimizer.step()\n"
        f"    {statement}\n"
    )
    runs = [(cases, harness_result(exercise, source, cases)) for cases in groups(exercise)]
    report = grade_runs(exercise, runs, GRADING_LIMITS)
    assert report.diagnosis == diagnosis, report.feedback


def test_whatever_judging_a_trace_raises_is_the_learners_failure(monkeypatch: Any) -> None:
    """A judge that trips over some learner value it did not expect makes no server error.

    It judges the reference's own trajectories as before: a judge that fails on those too is
    the exercise's or the grader's fault (GraderFault, tests/graders/test_configuration.py)."""
    exercise = next(e for e in EXERCISES if e.id == "train-step")
    reference = trusted_trajectories(exercise)["reference"]

    def judge_tripping_on_learner_values(
        exercise: Exercise, traces: dict[str, Any], output: str = ""
    ) -> GradeReport:
        if traces is reference:
            return judge(exercise, traces, output)
        raise OverflowError("a value no judge expected")

    def tripping(*_: Any) -> None:
        raise OverflowError("a value no judge expected")

    monkeypatch.setattr("graders.grading.judge", judge_tripping_on_learner_values)
    report = grade_documents(exercise, DOCUMENTS[exercise.id])
    assert (report.score, report.diagnosis) == (0, "incorrect")
    assert "could not be judged" in report.feedback
    monkeypatch.setattr("graders.grading.trace_failure", tripping)
    assert grade_documents(exercise, DOCUMENTS[exercise.id]).diagnosis == "incorrect"
