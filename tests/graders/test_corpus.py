"""The corpus of learner submissions (tests/graders/corpus/), graded through the real sandbox.

Every file says on its first line the diagnosis and the score band it must get. The corpus is
graded once, through the warm pool a server grades with: a diagnosis is made from the traces,
and test_pool_grades.py holds the pool's reports to cold runs' on each exercise and on each
failure class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import sandbox
from graders import grade, grading
from graders.diagnoses import registry
from graders.exercises import get_exercise, list_exercises
from graders.feedback import diagnosis_words
from graders.report import GradeReport
from tests.graders.conftest import SHARED_LIMITS

CORPUS = Path(__file__).resolve().parent / "corpus"
EXERCISES = Path(__file__).resolve().parents[2] / "exercises"
HEADER = re.compile(r"# expect: (?P<diagnosis>[a-z-]+), score (?P<low>[\d.]+)-(?P<high>[\d.]+)\n")


@dataclass(frozen=True)
class Expectation:
    exercise: str
    name: str
    diagnosis: str
    low: float
    high: float
    source: str


def read_corpus() -> list[Expectation]:
    expectations = []
    for path in sorted(CORPUS.glob("*/*.py")):
        source = path.read_text()
        header = HEADER.match(source)
        assert header, f"{path}: the first line must be '# expect: <diagnosis>, score <a>-<b>'"
        expectations.append(
            Expectation(
                exercise=path.parent.name,
                name=path.stem,
                diagnosis=header["diagnosis"],
                low=float(header["low"]),
                high=float(header["high"]),
                source=source,
            )
        )
    return expectations


ENTRIES = read_corpus()


@pytest.fixture(scope="module")
def reports(grading_runner: sandbox.Runner) -> dict[tuple[str, str], GradeReport]:
    """Every corpus file graded once, through the warm pool."""
    return {
        (e.exercise, e.name): grade(e.exercise, e.source, SHARED_LIMITS, grading_runner)
        for e in ENTRIES
    }


def test_the_corpus_covers_every_exercise_apart_from_the_declared_bugs() -> None:
    assert len(ENTRIES) >= 40
    per_exercise = {e.id: [x for x in ENTRIES if x.exercise == e.id] for e in list_exercises()}
    assert all(len(entries) >= 8 for entries in per_exercise.values()), per_exercise.keys()
    declared = {path.read_text().strip() for path in EXERCISES.glob("*/bugs/*.py")}
    assert not [e.name for e in ENTRIES if e.source.split("\n", 1)[1].strip() in declared]
    assert {e.diagnosis for e in ENTRIES} <= set(registry())


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.exercise}/{e.name}")
def test_every_submission_is_graded_right(
    entry: Expectation, reports: dict[tuple[str, str], GradeReport]
) -> None:
    report = reports[(entry.exercise, entry.name)]
    assert report.diagnosis == entry.diagnosis, report.feedback
    assert entry.low <= report.score <= entry.high, report.feedback
    if entry.diagnosis == "correct":
        assert report.score == get_exercise(entry.exercise).max_score
        return
    # A check with no points (a fact the code could forge) fails too, losing nothing.
    assert report.score < report.max_score or not all(c.passed for c in report.checks)
    assert diagnosis_words(report.diagnosis, get_exercise(entry.exercise)) in report.feedback
    first_failure = next(c for c in report.checks if not c.passed)
    # Each point is said once: the checks table says what differs, the feedback names the
    # diagnosis or, with none, points at the first failing check.
    if report.diagnosis not in {record.code for record in grading.DECLARED}:
        # (A run that failed is the exception: its error is the feedback and the `runs` check.)
        assert first_failure.message not in report.feedback
    if report.diagnosis == "incorrect":
        assert f"`{first_failure.id}`" in report.feedback
