"""A grade's run ends when the harness does: what the learner's code started is killed with it,
on every sandbox backend, and a correct loop that left a child behind is graded in full."""

from __future__ import annotations

from pathlib import Path

import pytest

from graders import grade
from tests.sandbox.conftest import backend  # noqa: F401  (the fixture: each backend in turn)

SOLUTION = Path(__file__).resolve().parents[2] / "exercises" / "train-step" / "solution.py"
# Far longer than the wall-clock backstop: had the run waited for them, it would time out.
LEFT_BEHIND = {
    "subprocess": "import subprocess\nsubprocess.Popen(['sleep', '300'])\n",
    "fork": "import os, time\nif os.fork() == 0:\n    time.sleep(300)\n    os._exit(0)\n",
}


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("start", sorted(LEFT_BEHIND))
def test_a_child_left_running_neither_holds_the_grade_nor_costs_points(start: str) -> None:
    report = grade("train-step", LEFT_BEHIND[start] + SOLUTION.read_text())
    assert report.diagnosis == "correct", report.feedback
    assert report.score == report.max_score > 0
