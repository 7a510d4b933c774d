"""How long the hidden cases take tells about a bit, however learner code spends its time there.

Learner code knows the hidden cases only in the part of its run after the request (sandbox/
supervise.py). That part is held to a budget of its own (a multiple of the reference's CPU
time, with floors, in CPU and in wall time not spent waiting for a core), and a grading is
released (stored, announced) only at its start plus the first of a few coarse delays that
covers it (graders.grading.HiddenBudget): code that sleeps or computes an amount derived from a
hidden seed is graded as it is, at the same delay; code that goes beyond the budget is stopped
and told the fixed hidden-time message, no number. Timing is asserted only from below: what the
release guarantees, whatever the machine's load.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator

import pytest

import sandbox
from graders.exercises import get_exercise
from graders.grading import (
    GRADING_LIMITS,
    HIDDEN_CPU_FLOOR_SECONDS,
    HIDDEN_FAILURES,
    JUDGING_ALLOWANCE_SECONDS,
    POOL_PROGRAM,
    RELEASE_DELAYS,
    HiddenBudget,
    grade_with_release,
    hidden_budget,
)
from sandbox import Limits, RunResult
from tests.graders.test_hidden import assert_conceals
from tests.sandbox.conftest import POOL_NEEDS_GROUPS

TRAIN_STEP = get_exercise("train-step")
LIMITS = Limits(wall_timeout_seconds=120.0, cpu_seconds=60.0)
# The harness seeds torch from each case: torch.initial_seed() is the case's seed, 0 and 1 in
# the visible cases of train-step, 17 and 42 in its hidden ones.
CORRECT_STEP = TRAIN_STEP.solution_code.split("\n", 1)[1]


def released_at_a_delay(seconds: float, budget: HiddenBudget) -> bool:
    """`seconds` after the hidden part's start is one of the delays, or (a report ready later
    on a loaded machine) a whole multiple of one."""
    return any(
        seconds >= delay and math.isclose(seconds / delay, round(seconds / delay), abs_tol=1e-9)
        for delay in budget.delays_seconds
    )


def hidden_part(
    *, wall_seconds: float, cpu_seconds: float, waited_seconds: float | None
) -> RunResult:
    """A hidden part as the sandbox measures it (only its times count here)."""
    return RunResult(
        exit_code=0, signal=None, timed_out=False, cpu_time_exceeded=False,
        memory_exceeded=False, process_limit_exceeded=False, file_size_exceeded=False,
        open_files_exceeded=False, output_truncated=False, payload_truncated=False,
        wall_seconds=wall_seconds, cpu_seconds=cpu_seconds, peak_memory_bytes=None,
        payload=b"", stdout=b"", stderr=b"", waited_seconds=waited_seconds,
    )  # fmt: skip


def step_that(spends: str) -> str:
    """train-step's solution, spending time as `spends` says at each call first (`seed` is the
    case's, `hidden` whether it is a hidden one)."""
    return (
        "import time, torch\n"
        "def train_step(model, optimizer, loss_fn, x, y):\n"
        "    seed = torch.initial_seed()\n"
        "    hidden = seed not in (0, 1)\n"
        f"    {spends}\n"
        f"{CORRECT_STEP}"
    )


@pytest.fixture(
    scope="module", params=["bwrap", pytest.param("bwrap-pool", marks=POOL_NEEDS_GROUPS)]
)
def runner(request: pytest.FixtureRequest) -> Iterator[sandbox.Runner]:
    pool = request.param == "bwrap-pool"
    opened = sandbox.open_runner("bwrap", pool=POOL_PROGRAM if pool else None, pool_size=1)
    yield opened
    opened.close()


def test_the_budget_is_the_reference_s_multiple_with_floors_and_coarse_delays() -> None:
    budget = hidden_budget(TRAIN_STEP)
    assert budget.cpu_seconds >= HIDDEN_CPU_FLOOR_SECONDS and budget.first_delay_seconds >= 0.25
    delays = budget.delays_seconds
    assert len(delays) == RELEASE_DELAYS and delays == sorted(delays)
    assert all(later >= 4 * earlier for earlier, later in itertools.pairwise(delays))
    assert delays[-1] == 16.0 and budget.cpu_seconds < delays[1]
    limits = budget.limits(GRADING_LIMITS)
    assert limits.later_cpu_seconds == budget.cpu_seconds < GRADING_LIMITS.cpu_seconds
    # The wall time not spent waiting for a core: the same figure, within the second delay at
    # the floor; the plain wall time only a backstop, at the last delay.
    assert limits.later_unwaited_wall_seconds == budget.unwaited_wall_seconds == budget.cpu_seconds
    assert limits.later_wall_timeout_seconds == delays[-1] == budget.wall_seconds
    # Tighter caps given by the caller stay.
    tight = dataclasses.replace(
        LIMITS,
        later_wall_timeout_seconds=1.0,
        later_cpu_seconds=0.3,
        later_unwaited_wall_seconds=0.25,
    )
    tightened = budget.limits(tight)
    assert (
        tightened.later_wall_timeout_seconds,
        tightened.later_cpu_seconds,
        tightened.later_unwaited_wall_seconds,
    ) == (1.0, 0.3, 0.25)


@pytest.mark.parametrize("reference_seconds", [0.0, 0.001, 0.02, 0.03, 0.04, 0.1, 2.0])
def test_what_code_can_stretch_its_part_to_spans_two_delays_at_most(
    reference_seconds: float,
) -> None:
    """On an idle machine code stretches its part from nothing up to the unwaited budget plus
    the CPU budget (sleeping, then its own threads waiting for each other). Shifted by any fixed
    cost of the grading around the part, that span meets at most two of the delays."""
    budget = HiddenBudget.of_reference(reference_seconds)
    span = budget.unwaited_wall_seconds + budget.cpu_seconds
    first, second, *_ = budget.delays_seconds
    assert span <= second - first
    for fixed_cost in (0.0, 0.05, JUDGING_ALLOWANCE_SECONDS, 0.2, 0.24, 0.3, 0.9, 1.5):
        shortest, longest = fixed_cost, fixed_cost + span
        delays = {budget.release_delay(t) for t in (shortest, (shortest + longest) / 2, longest)}
        assert len(delays) <= 2, (fixed_cost, delays)


def test_every_time_up_to_a_delay_is_released_at_that_delay() -> None:
    budget = HiddenBudget(cpu_seconds=1.0, first_delay_seconds=0.25)
    first, second, *_, last = budget.delays_seconds
    assert {budget.release_delay(t) for t in (0.0, 0.001, 0.1, 0.17, 0.2499, first)} == {first}
    assert {budget.release_delay(t) for t in (first + 1e-9, 0.42, second)} == {second}
    # Past the last delay the part was stopped: what remains is the stop's, not the code's.
    assert budget.release_delay(last + 0.3) == last + 0.3


def test_the_delay_is_chosen_from_the_part_s_own_work_not_the_machine_s_load() -> None:
    """A correct part's own work (0.03 s of CPU, 0.05 s not waiting) is released at the first
    delay however long it waited for a core and the server took to judge it; a report the
    loaded server had ready only later, at the first multiple of that delay after it, not at
    the next delay. Work the code itself stretched past the first delay meets the second."""
    budget = HiddenBudget(cpu_seconds=HIDDEN_CPU_FLOOR_SECONDS, first_delay_seconds=0.25)
    first, second, *_ = budget.delays_seconds
    for waited, released in ((0.0, first), (0.1, first), (0.5, 3 * first), (3.0, 13 * first)):
        honest = hidden_part(wall_seconds=0.05 + waited, cpu_seconds=0.03, waited_seconds=waited)
        ready = honest.wall_seconds + 0.01
        assert budget.release_after(honest, ready_seconds=ready) == released, waited
    sleeper = hidden_part(wall_seconds=0.3, cpu_seconds=0.01, waited_seconds=0.0)
    assert budget.release_after(sleeper, ready_seconds=0.31) == second
    # Its own threads waiting for each other: their waits count as its work (its CPU).
    spinner = hidden_part(wall_seconds=0.3, cpu_seconds=0.3, waited_seconds=0.15)
    assert budget.release_after(spinner, ready_seconds=0.31) == second
    # Where no wait is seen (gVisor), the part's wall time is its work.
    unseen = hidden_part(wall_seconds=0.3, cpu_seconds=0.01, waited_seconds=None)
    assert budget.release_after(unseen, ready_seconds=0.31) == second


@pytest.mark.parametrize("per_seed_seconds", [0.0, 0.002])
def test_correct_code_spending_a_hidden_seed_s_worth_of_time_is_released_at_a_delay(
    runner: sandbox.Runner, per_seed_seconds: float
) -> None:
    sleeps = step_that(f"time.sleep(seed * {per_seed_seconds})")
    graded = grade_with_release("train-step", sleeps, LIMITS, runner)
    assert graded.report.diagnosis == "correct", graded.report.feedback
    assert graded.report.score == graded.report.max_score
    assert_conceals(TRAIN_STEP, graded.report)
    assert graded.hidden_started_at is not None
    budget = hidden_budget(TRAIN_STEP)
    # 0.002 s a seed sleeps 17 * 0.002 * 5 + 42 * 0.002 * 4 = 0.51 s, within the unwaited
    # budget (0.875 s at the floor): released at the second delay on an idle machine, and
    # whatever the load, at one of the few delays, never finer.
    assert released_at_a_delay(graded.release_at - graded.hidden_started_at, budget)


def test_correct_code_spinning_a_hidden_seed_s_worth_of_cpu_is_graded_correct(
    runner: sandbox.Runner,
) -> None:
    spins = step_that(
        "end = time.process_time() + seed * 0.001\n    while time.process_time() < end: pass"
    )
    graded = grade_with_release("train-step", spins, LIMITS, runner)
    assert graded.report.diagnosis == "correct", graded.report.feedback
    assert graded.hidden_started_at is not None
    assert released_at_a_delay(
        graded.release_at - graded.hidden_started_at, hidden_budget(TRAIN_STEP)
    )


@pytest.mark.parametrize(
    "spends",
    [
        # Beyond the wall time not spent waiting (0.875 s at the floor): stopped long before the
        # wall backstop (16 s).
        "if hidden: time.sleep(3)",
        "while hidden: pass",  # beyond the CPU budget
    ],
)
def test_code_beyond_the_hidden_budget_is_stopped_and_told_the_fixed_message(
    runner: sandbox.Runner, spends: str
) -> None:
    graded = grade_with_release("train-step", step_that(spends), LIMITS, runner)
    report = graded.report
    assert report.diagnosis == "timeout", report.feedback
    assert report.score == 0
    assert report.facts == HIDDEN_FAILURES["timeout"]
    assert_conceals(TRAIN_STEP, report)
    assert not any(ch.isdigit() for ch in report.facts)
    assert graded.hidden_started_at is not None
    budget = hidden_budget(TRAIN_STEP)
    assert budget.unwaited_wall_seconds < 3.0 < budget.wall_seconds
    assert graded.release_at - graded.hidden_started_at >= budget.cpu_seconds


def test_a_visible_failure_is_released_after_the_hidden_part_too(runner: sandbox.Runner) -> None:
    # The hidden part runs in the same run: its time is in the moment the report is ready.
    wrong = step_that("if not hidden: raise ValueError('visible')")
    graded = grade_with_release("train-step", wrong, LIMITS, runner)
    assert graded.report.diagnosis == "runtime-error"
    assert graded.hidden_started_at is not None
    assert released_at_a_delay(
        graded.release_at - graded.hidden_started_at, hidden_budget(TRAIN_STEP)
    )


@pytest.mark.parametrize(
    "top_level",
    [
        "time.sleep(1.2)",  # past the unwaited budget at the floor
        "_end = time.process_time() + 1.2\nwhile time.process_time() < _end: pass",  # past its CPU
    ],
)
def test_slow_top_level_code_runs_once_before_the_visible_cases_not_in_the_hidden_part(
    runner: sandbox.Runner, top_level: str
) -> None:
    """A notebook's demo loop left at the top of the file: the module is loaded once, for the
    visible cases, and the hidden ones call the same function, so it never counts against the
    hidden part's budget."""
    assert hidden_budget(TRAIN_STEP).cpu_seconds < 1.2
    code = f"import time, torch\n{top_level}\n" + TRAIN_STEP.solution_code
    graded = grade_with_release("train-step", code, LIMITS, runner)
    assert graded.report.diagnosis == "correct", graded.report.feedback
    assert graded.report.score == graded.report.max_score
