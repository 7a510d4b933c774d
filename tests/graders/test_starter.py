"""The starter code earns nothing on every exercise: unchanged, reformatted, or edited without
changing what it does, it is `not-started`, with score 0 (judged in this process, as
check-exercises does; test_unit.py grades it through the sandbox)."""

from __future__ import annotations

import ast

import pytest

from graders.exercises import Exercise, list_exercises
from graders.proving import judge_source, trace_source
from graders.starter import NOT_SCORED, is_starter_source

EXERCISES = list_exercises()


def without_docstrings(source: str) -> str:
    """The source with its docstrings' lines deleted, as a learner would delete them (a
    docstring may span lines; comments stay)."""
    docstring_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            first, last = body[0].lineno, body[0].end_lineno or body[0].lineno
            docstring_lines.update(range(first, last + 1))
    lines = source.splitlines()
    return "\n".join(line for number, line in enumerate(lines, 1) if number not in docstring_lines)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_the_starter_is_recognised_whatever_its_layout_comments_and_docstrings(
    exercise: Exercise,
) -> None:
    starter = exercise.starter_code
    for same in (
        starter,
        ast.unparse(ast.parse(starter)),  # other quotes and blank lines, no comments
        "# my answer\n\n" + starter.replace("    ", "  ") + "\n# done\n",
        without_docstrings(starter),
    ):
        assert is_starter_source(exercise, same), same
        report = judge_source(exercise, same)
        assert (report.score, report.diagnosis) == (0, "not-started")
        assert all(not c.passed and c.points == 0 and not c.hidden for c in report.checks)
        assert all(c.message == NOT_SCORED.text for c in report.checks)
    assert not is_starter_source(exercise, exercise.solution_code)
    assert not is_starter_source(exercise, "def (")


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_a_starter_edited_without_changing_what_it_does_earns_nothing(exercise: Exercise) -> None:
    edited = "import math\n\n" + exercise.starter_code + "\nUNUSED = math.pi\n"
    assert not is_starter_source(exercise, edited)
    traces, failure = trace_source(exercise, edited)
    assert failure is None and traces  # it ran, and its trajectory is the starter's
    report = judge_source(exercise, edited)
    assert (report.score, report.diagnosis) == (0, "not-started"), report.feedback
    assert NOT_SCORED.text not in report.feedback  # said once, by the checks
    assert all(c.message == NOT_SCORED.text for c in report.checks)


def test_a_tuple_of_placeholders_holds_no_copies() -> None:
    """`first = ...`: both returned values are placeholders, and no copy of anything."""
    exercise = next(e for e in EXERCISES if e.id == "prove-accumulation")
    placeholder = "def accumulation_demo(model, loss_fn, x, y):\n    return ..., ...\n"
    report = judge_source(exercise, placeholder)
    copies = next(c for c in report.checks if c.id == "copies")
    assert not copies.passed
    assert "no gradient tensors" in copies.message
