"""The kinds' registry: every kind declared whole, its recorder runnable in the sandbox, and a
declaration with a piece missing refused at start-up with the reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from graders import harness
from graders.exercises import list_exercises
from graders.kinds import (
    KINDS,
    SANDBOX_PROGRAM,
    KindDeclarationError,
    _checked,
    _sandbox_program,
    gradient_reading,
    kind_of,
    step_function,
)

COUNTER = 0


def test_every_exercise_names_a_registered_kind_named_by_what_it_judges() -> None:
    assert {kind_of(e).name for e in list_exercises()} <= set(KINDS)
    exercise_ids = {e.id for e in list_exercises()}
    assert not exercise_ids & set(KINDS), "a kind is named like an exercise"


def test_the_sandbox_program_registers_every_kind_s_recorder() -> None:
    namespace: dict[str, Any] = {"__name__": "not-main"}
    exec(compile(SANDBOX_PROGRAM, "harness.py", "exec"), namespace)
    assert set(namespace["RECORDERS"]) == set(KINDS)
    assert SANDBOX_PROGRAM.rstrip().endswith("main()")


def test_two_kinds_of_one_name_are_refused() -> None:
    with pytest.raises(KindDeclarationError, match="two kinds are named 'step-function'"):
        _checked([step_function.KIND, step_function.KIND])


def test_a_kind_without_checks_is_refused() -> None:
    judge = dataclasses.replace(step_function.JUDGE, checks={})
    broken = dataclasses.replace(step_function.KIND, name="no-checks", judge=judge)
    with pytest.raises(KindDeclarationError, match="'no-checks': a name, a summary and checks"):
        _checked([broken])


def record_with_a_counter(
    function: Callable[..., Any], spec: dict[str, Any], records: list[harness.Record]
) -> None:
    global COUNTER
    COUNTER += 1
    records.append({"value": function(COUNTER)})


def test_a_recorder_that_needs_its_module_is_refused() -> None:
    broken = dataclasses.replace(
        gradient_reading.KIND, name="counting", record=record_with_a_counter
    )
    with pytest.raises(KindDeclarationError, match="uses 'COUNTER', which the sandbox does not"):
        _sandbox_program([broken])


def build_case(
    function: Callable[..., Any], spec: dict[str, Any], records: list[harness.Record]
) -> None:
    records.append({})


def test_a_recorder_that_shadows_the_harness_is_refused() -> None:
    broken = dataclasses.replace(gradient_reading.KIND, name="shadowing", record=build_case)
    with pytest.raises(KindDeclarationError, match="would replace the harness's own build_case"):
        _sandbox_program([broken])


def test_a_helper_needed_by_a_recorder_is_shipped_with_it() -> None:
    without_helper = dataclasses.replace(gradient_reading.KIND, sandbox_helpers=())
    with pytest.raises(KindDeclarationError, match="'prepare_gradients'"):
        _sandbox_program([without_helper])
