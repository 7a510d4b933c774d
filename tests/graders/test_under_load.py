"""Grades do not depend on how busy the machine is: the same submissions get the same reports on
an idle machine and on one saturated by CPU burners, on every sandbox backend.

The learner is held to CPU time after the harness's set-up, not to the clock; the wall clock is
only a backstop far above what these submissions need even when they wait for a core.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from graders import grade
from tests.sandbox.conftest import backend  # noqa: F401  (the fixture: each backend in turn)

EXERCISE = Path(__file__).resolve().parents[2] / "exercises" / "train-step"
SUBMISSIONS = {
    "correct": (EXERCISE / "solution.py").read_text(),
    "buggy": (EXERCISE / "bugs" / "no_zero_grad.py").read_text(),
    # Returns at once: under load on docker it was graded `timeout` instead of wrong.
    "returns-at-once": "def train_step(model, optimizer, loss_fn, x, y):\n    return 0.0\n",
}
# Enough to keep every core busy with a queue of runnable processes besides the sandboxes.
BURNERS = 2 * (os.cpu_count() or 1) + 2


@contextmanager
def saturated() -> Iterator[None]:
    """Every core busy with CPU burners (started and stopped here) while the block runs."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BURNERS)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


@pytest.mark.usefixtures("backend")
def test_the_same_submissions_get_the_same_reports_idle_and_under_load() -> None:
    idle = {name: grade("train-step", code) for name, code in SUBMISSIONS.items()}
    with saturated():
        loaded = {name: grade("train-step", code) for name, code in SUBMISSIONS.items()}
    assert idle["correct"].diagnosis == "correct"
    assert idle["buggy"].diagnosis == "missing-zero-grad"
    assert idle["returns-at-once"].diagnosis != "timeout"
    for name in SUBMISSIONS:
        assert loaded[name].model_dump() == idle[name].model_dump(), name
