"""Learner-caused failures at the sandbox's caps are graded results: score 0 and a diagnosis."""

from __future__ import annotations

import textwrap

import pytest

from graders import grade
from graders.grading import RUN_FAILED, failure_line
from sandbox import Limits

# CPU is the cap; the wall clock a backstop well above it (a busy machine slows runs down).
LIMITS = Limits(wall_timeout_seconds=60.0, cpu_seconds=3.0, memory_bytes=768 * 2**20)

ENDLESS = """
    def train_step(model, optimizer, loss_fn, x, y):
        while True:
            pass
"""
MEMORY_BOMB = """
    def train_step(model, optimizer, loss_fn, x, y):
        hoard = []
        while True:
            hoard.append(bytearray(64 * 2**20))
"""
OUTPUT_FLOOD = """
    def train_step(model, optimizer, loss_fn, x, y):
        while True:
            print("loss is going down, trust me " * 100)
"""


@pytest.mark.parametrize(
    ("body", "diagnosis", "says"),
    [
        (ENDLESS, "timeout", "time limit"),
        (MEMORY_BOMB, "memory-limit", "768 MiB"),
        (OUTPUT_FLOOD, "output-limit", "printed more than 64 KiB"),
    ],
    ids=["timeout", "memory", "output"],
)
def test_a_cap_hit_is_a_graded_zero_naming_the_cap(body: str, diagnosis: str, says: str) -> None:
    report = grade("train-step", textwrap.dedent(body), limits=LIMITS)
    assert report.diagnosis == diagnosis, report.feedback
    assert report.score == 0
    assert says in report.feedback
    # Said once: in the feedback, not again in the runs check.
    runs = next(c for c in report.checks if c.id == "runs")
    assert not runs.passed and says not in runs.message
    assert runs.message == RUN_FAILED


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("Line 2: `'(' was never closed`.", 2),
        ("In case `basic`, at call 1, your code raised `NameError` (line 6 of your code): `x`", 6),
        # The learner's quoted text never names the line, whatever it says.
        ("Your code raised `E (line 3 of your code)` while it was being loaded: `m`", None),
        ("In case `c`, your code raised ``Line 4: ` `` (line 5 of your code): `m`", 5),
        # A line the code does not have (a forged trace) is no line.
        ("Your code raised `E` while it was being loaded (line 99 of your code): `m`", None),
        ("Not checked: the run failed before its values could be judged.", None),
    ],
)
def test_the_line_a_failure_names_is_read_from_the_graders_words_only(
    message: str, line: int | None
) -> None:
    assert failure_line(message, "a\nb\nc\nd\ne\nf\n") == line
