"""Cold grades shared across the graders' tests: each (exercise, source) runs once a session.

The learner corpus (test_corpus.py) and the cold-against-warm comparison (test_pool_grades.py)
grade the same files in a cold sandbox; sharing those runs halves the slowest part of the suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import sandbox
from graders import grade, grading
from graders.report import GradeReport
from sandbox import Limits

# Caps well above what these files use: they are about diagnosis, not caps (test_failures.py
# is). The wall clock is a backstop only; the CPU cap does not depend on the machine's load.
SHARED_LIMITS = Limits(wall_timeout_seconds=120.0, cpu_seconds=20.0, memory_bytes=768 * 2**20)

ColdGrade = Callable[[str, str], GradeReport]


@pytest.fixture(autouse=True)
def judgments_made_afresh() -> None:
    """Each test judges afresh. The judgment cache is keyed by the exercise's folder hash and
    the recorded values: an exercise a test changed in place, or a judge it patched, keeps that
    key and would be answered what an earlier test was."""
    grading._judgments.clear()


@pytest.fixture(scope="session")
def cold_grade() -> Iterator[ColdGrade]:
    """grade(exercise, source) in a cold bwrap sandbox under SHARED_LIMITS, once per session."""
    runner = sandbox.open_runner("bwrap")
    graded: dict[tuple[str, str], GradeReport] = {}

    def cold(exercise: str, source: str) -> GradeReport:
        if (exercise, source) not in graded:  # a race only grades twice, the same way
            graded[exercise, source] = grade(exercise, source, SHARED_LIMITS, runner)
        return graded[exercise, source]

    yield cold
    runner.close()
