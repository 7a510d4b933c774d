"""The warm pool grades exactly as cold sandboxes do, whether its slots are bubblewrap sandboxes
or containers (the cold grades are bwrap's, shared).

A warm run differs from a cold one only in the process it starts from (what the zygote imported,
drew and set), and every program meets that alike. So the solution and first known bug of one
exercise of each kind, and learner failures at each cap, are graded cold and warm, report for
report; every known bug of every exercise is graded warm and must get its declared diagnosis.
The failures are those whose cause does not depend on how busy the machine is (a time limit
does: the CPU or the wall clock may come first, and each has its own message). The learner
corpus (tests/graders/corpus) is graded through the pool by test_corpus.py.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import sandbox
from graders import grade
from graders.exercises import get_exercise, list_exercises
from graders.grading import POOL_PROGRAM, trusted_trajectories
from sandbox.backends import BACKENDS
from tests.graders.conftest import SHARED_LIMITS, ColdGrade
from tests.sandbox.conftest import POOL_NEEDS_GROUPS, docker_unavailable_reason

pytestmark = POOL_NEEDS_GROUPS

FAILURES = {
    "syntax-error": "def train_step(model, optimizer, loss_fn, x, y)\n    pass\n",
    "missing-function": "def train(model):\n    pass\n",
    "load-error": "import no_such_module\n",
    "raises": "def train_step(model, optimizer, loss_fn, x, y):\n    raise ValueError('nope')\n",
    "prints": "def train_step(model, optimizer, loss_fn, x, y):\n    print('step', x.sum())\n",
    "exits-early": "import os\ndef train_step(model, optimizer, loss_fn, x, y):\n    os._exit(0)\n",
    "sys-exit": "import sys\nsys.exit(3)\n",
    "memory-bomb": textwrap.dedent("""
        def train_step(model, optimizer, loss_fn, x, y):
            hoard = []
            while True:
                hoard.append(bytearray(64 * 2**20))
    """),
    "output-flood": textwrap.dedent("""
        def train_step(model, optimizer, loss_fn, x, y):
            while True:
                print("loss is going down, trust me " * 100)
    """),
}


def known_programs() -> list[tuple[str, str, str, str]]:
    """(exercise, name, source, diagnosis) of every exercise's solution, starter and known bugs."""
    found = []
    for exercise in list_exercises():
        found.append((exercise.id, "solution", exercise.solution_code, "correct"))
        found.append((exercise.id, "starter", exercise.starter_code, "not-started"))
        found += [(exercise.id, v.id, v.source, v.diagnosis) for v in exercise.variants]
    return found


def cold_and_warm_programs() -> list[tuple[str, str, str]]:
    """(exercise, name, source) of the solution and first known bug of one exercise of each
    kind (a kind's recorder is what runs in the sandbox: exercises of a kind differ in their
    data alone), and the learner failures."""
    found = []
    kinds = set()
    for exercise in list_exercises():
        if exercise.kind in kinds:
            continue
        kinds.add(exercise.kind)
        found.append((exercise.id, "solution", exercise.solution_code))
        bug = exercise.variants[0]
        found.append((exercise.id, bug.id, bug.source))
    found += [("train-step", name, source) for name, source in FAILURES.items()]
    return found


@pytest.fixture(scope="module", params=list(BACKENDS))
def warm(request: pytest.FixtureRequest) -> Iterator[sandbox.Runner]:
    """A warm pool in bubblewrap (the session's grading_runner), and one in the docker
    backend's slot containers. Never a cold fallback: the comparison is against a pool."""
    if request.param == "bwrap":
        runner = request.getfixturevalue("grading_runner")
        assert isinstance(runner, sandbox.PoolRunner), runner.status
        yield runner
        return
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(f"no docker sandbox on this host: {reason}")
    runner = sandbox.open_runner("docker", pool=POOL_PROGRAM, pool_size=2)
    assert isinstance(runner, sandbox.PoolRunner), runner.status
    yield runner
    runner.close()


def test_every_known_bug_gets_its_diagnosis_in_the_warm_pool(warm: sandbox.Runner) -> None:
    programs = known_programs()
    assert len(programs) > 60

    def graded(item: tuple[str, str, str, str]) -> tuple[str, str, str]:
        exercise, name, source, diagnosis = item
        report = grade(exercise, source, SHARED_LIMITS, warm)
        return f"{exercise}/{name}", diagnosis, report.diagnosis

    with ThreadPoolExecutor(2) as workers:
        results = list(workers.map(graded, programs))
    wrong = {name: (declared, got) for name, declared, got in results if declared != got}
    assert wrong == {}


def test_the_same_report_cold_and_warm(cold_grade: ColdGrade, warm: sandbox.Runner) -> None:
    programs = cold_and_warm_programs()
    kinds = {get_exercise(exercise).kind for exercise, _, _ in programs}
    assert kinds == {e.kind for e in list_exercises()}

    def both(item: tuple[str, str, str]) -> tuple[str, dict[str, object], dict[str, object]]:
        exercise, name, source = item
        cold_report = cold_grade(exercise, source).model_dump()
        warm_report = grade(exercise, source, SHARED_LIMITS, warm).model_dump()
        return f"{exercise}/{name}", cold_report, warm_report

    with ThreadPoolExecutor(2) as workers:
        results = list(workers.map(both, programs))
    different = {
        name: {key for key in cold_report if cold_report[key] != warm_report[key]}
        for name, cold_report, warm_report in results
        if cold_report != warm_report
    }
    assert different == {}, {name: results_of(results, name) for name in different}
    diagnoses = {report["diagnosis"] for _, report, _ in results}
    # The programs reach the cases that matter: right, wrong in known ways, and at the caps.
    assert {"correct", "missing-zero-grad", "syntax-error", "memory-limit", "output-limit"} <= (
        diagnoses
    )


def results_of(
    results: list[tuple[str, dict[str, object], dict[str, object]]], name: str
) -> dict[str, object]:
    """What differs between the cold and the warm report of one submission, to read in CI."""
    cold, warm = next((c, w) for n, c, w in results if n == name)
    return {key: (cold[key], warm[key]) for key in cold if cold[key] != warm[key]}


def test_trusted_trajectories_are_computed_once_per_exercise_version() -> None:
    exercise = get_exercise("train-step")
    first = trusted_trajectories(exercise)
    assert trusted_trajectories(exercise) is first
    changed = exercise.model_copy(update={"version": exercise.version + "-changed"})
    again = trusted_trajectories(changed)
    assert again is not first
    assert again == first  # the same files: the same numbers, computed anew


# Code that draws from the global generators unseeded: a warm pool's child inherits whatever
# its zygote drew (torch's generator built the warm-up's model), a cold run starts afresh
# (Python's and numpy's from the OS). The harness seeds them from each case (issue 34).
DRAWS_UNSEEDED = """
import random

import numpy
import torch

NOISE_AT_LOAD = torch.rand(1).item()


def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    noise = NOISE_AT_LOAD + torch.rand(1).item() + random.random() + float(numpy.random.rand())
    loss = loss_fn(model(x), y) * (1 + noise)
    loss.backward()
    optimizer.step()
    return loss.item()
"""


def test_code_drawing_unseeded_random_numbers_gets_the_same_report_cold_and_warm(
    cold_grade: ColdGrade, warm: sandbox.Runner
) -> None:
    cold = cold_grade("train-step", DRAWS_UNSEEDED)
    assert cold.score < cold.max_score  # its numbers are the draws'
    warm_reports = [grade("train-step", DRAWS_UNSEEDED, SHARED_LIMITS, warm) for _ in range(2)]
    for report in warm_reports:
        assert report.model_dump() == cold.model_dump(), report.feedback
