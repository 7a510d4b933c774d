"""Learner-caused failures at the sandbox's caps are graded results: score 0 and a diagnosis."""

from __future__ import annotations

import textwrap

import pytest

from graders import grade
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
    runs = next(c for c in report.checks if c.id == "runs")
    assert not runs.passed and says in runs.message
