"""Recognising the starter code: a submission that is it, or behaves exactly as it does.

Such a submission is `not-started`: it scores 0 whatever checks its placeholder would pass (a
placeholder runs, changes no weights, returns a float), and the class statistics leave it out.
"""

from __future__ import annotations

import ast
import functools

from graders.diagnoses import Declared
from graders.exercises import Exercise
from graders.feedback import render
from graders.judging import call_stream, same_trace
from graders.report import Check, GradeReport
from graders.sentences import Sentence
from graders.syntax import parse_module
from graders.trace import CaseTrace

NOT_SCORED = Sentence(
    "starter/not-scored",
    "Not scored: your code is the starter code, or behaves exactly as it does.",
)


# Kept for the starters and for sources graded again (a class's common bugs): parsing and
# dumping the two trees was a quarter of a grading's own CPU when its judgment is cached.
@functools.lru_cache(maxsize=256)
def _code_shape(source: str) -> str | None:
    """The source's syntax tree without comments, layout and docstrings; None if unreadable."""
    try:
        tree = parse_module(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)
        ):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


def is_starter_source(exercise: Exercise, source: str) -> bool:
    """Is this the exercise's starter code, comments, blank lines and docstrings aside?"""
    # A submission much longer than the starter is not it: no need to parse it here.
    if len(source) > 4 * len(exercise.starter_code) + 4096:
        return False
    shape = _code_shape(source)
    return shape is not None and shape == _code_shape(exercise.starter_code)


def behaves_as_starter(
    exercise: Exercise, traces: dict[str, CaseTrace], starter: dict[str, CaseTrace]
) -> bool:
    """Does the learner's code record exactly the starter's values and calls, in every case?"""
    return all(
        starter[spec.id].error is None
        and same_trace(traces[spec.id], starter[spec.id])
        and call_stream(traces[spec.id]) == call_stream(starter[spec.id])
        for spec in exercise.cases
    )


def not_started_report(exercise: Exercise, output: str = "") -> GradeReport:
    """Score 0, diagnosis `not-started`: nothing of the exercise is done yet."""
    return GradeReport(
        exercise=exercise.id,
        exercise_version=exercise.version,
        score=0,
        max_score=exercise.max_score,
        diagnosis="not-started",
        checks=[
            Check(
                id=check_id,
                passed=False,
                points=0,
                max_points=points,
                message=NOT_SCORED.text,
                said=NOT_SCORED(),
            )
            for check_id, points in exercise.checks.items()
        ],
        # The checks say NOT_SCORED; the feedback says why, once.
        feedback=render("", "not-started", exercise),
        output=output,
    )


# The diagnoses this module gives (graders.diagnoses).
DECLARED: tuple[Declared, ...] = (
    Declared(
        code="not-started",
        name="Not started",
        words=(
            "Nothing of the exercise is done yet, so nothing is scored. Make the changes the "
            "exercise asks for and submit again."
        ),
    ),
)
