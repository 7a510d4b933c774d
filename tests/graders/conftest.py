"""The runners the graders' tests grade through, each opened once a session.

`grading_runner` is what a server grades with: a warm bubblewrap pool (cold runs where this host
cannot start one, as a server falls back). `cold_grade` grades in a cold sandbox, each (exercise,
source) once: test_pool_grades.py holds the pool to the cold runner's reports, once for each
warm backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import sandbox
from graders import grade, grading
from graders.grading import POOL_PROGRAM
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


@pytest.fixture(scope="session")
def grading_runner() -> Iterator[sandbox.Runner]:
    """The runner a server grades with: a warm pool of two slots in front of bwrap."""
    runner = sandbox.open_runner("bwrap", pool=POOL_PROGRAM, pool_size=2)
    yield runner
    runner.close()
