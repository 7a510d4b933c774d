"""Invariant 5: whatever happens in a hidden case, the learner sees the check, pass or fail, and
a fixed message per failure class; never a string, number or name that learner code chose.

Learner code knows the hidden cases once they are given (after the harness asks for them, in
the part of the run after the request; sandbox/supervise.py), so every channel from that part
back to the report is tried: an exception's message and type name,
SyntaxError fields, the exit status, a signal, printed output, the number of records, partial
traces, values and type names in records, non-finite values, every cap. The whole report,
serialized, must hold no hidden case parameter: id, seed, learning rate, momentum, batch size,
steps, initial or expected values.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch

import sandbox
from graders import grade
from graders.exercise import CaseSpec, Exercise
from graders.exercises import get_exercise
from graders.grading import (
    GRADING_LIMITS,
    HIDDEN_FAILURES,
    RUN_FAILED,
    _run,
    grade_runs,
    trusted_trajectories,
)
from graders.judging import HIDDEN_CHECK_FAILURE, case_data
from graders.kinds import training_loop
from graders.report import GradeReport
from sandbox import Limits, RunResult
from tests.graders.sandbox_results import groups, harness_document, harness_result, result

MARK = "LEAK"


# A change made to the harness document of a hidden run, in place or by returning a new one.
DocumentEdit = Callable[[dict[str, Any], list[CaseSpec]], dict[str, Any] | None]


def secrets(exercise: Exercise) -> list[str]:
    """Strings that would betray a hidden case of the exercise."""
    found: list[str] = []
    reference = trusted_trajectories(exercise)["reference"]
    for spec in exercise.cases:
        if not spec.hidden:
            continue
        found += [spec.id, str(spec.seed), repr(spec.lr), f"{spec.lr:g}"]
        found += [str(n) for n in (spec.batch_size, spec.steps) if n >= 10]
        if spec.momentum:
            found += [repr(spec.momentum)]
        start = case_data(spec).weight.flatten().tolist()
        # The first layer's weight after each call: a record's own field, or the first of
        # every parameter flattened (`parameters`, the kinds that record them so).
        first = case_data(spec).first
        after = [
            v
            for r in reference[spec.id].records
            for v in (torch.tensor(r[first]).flatten().tolist() if first in r else r["parameters"])
        ]
        for value in start[:4] + after[:4]:
            found += [repr(value), f"{value:.6g}", f"{value:.4g}"]
    return found


# A date or a time of day as pages and answers print them (2026-12-05 11:42 UTC,
# 2026-12-05T11:42:07.1+00:00): the clock is not a hidden seed of 42 or 12.
CLOCK = re.compile(r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:[+-]\d\d:\d\d|Z)?)?")


def betrayed(secrets: Iterable[str], text: str) -> list[str]:
    """The secrets written whole in `text` (a seed of 17 is not in 0.1738), its clock aside."""
    text = CLOCK.sub(" ", text)
    return [s for s in secrets if re.search(rf"(?<![\w.]){re.escape(s)}(?![\w])", text)]


def assert_conceals(exercise: Exercise, report: GradeReport) -> None:
    text = report.model_dump_json(exclude={"exercise_version"})
    assert MARK not in text
    assert not betrayed(secrets(exercise), text), text
    for check in report.checks:
        if check.hidden:
            assert check.message == HIDDEN_CHECK_FAILURE


def leak(exercise: Exercise) -> str:
    """What hostile code in the hidden run would send: everything it knows about the cases."""
    hidden = [c.harness_spec() for c in exercise.cases if c.hidden]
    return f"{MARK} {json.dumps(hidden)}"


def error_record(message: str, type_name: str = "ValueError", line: int = 17) -> dict[str, Any]:
    return {
        "type": type_name,
        "message": message,
        "line": line,
        "traceback": message,
        "grad_none": False,
    }


def hidden_run(exercise: Exercise, edit: DocumentEdit) -> bytes:
    """The reference's own hidden trace, edited; `edit` may return a whole new document."""
    cases = groups(exercise)[1]
    document = harness_document(exercise, exercise.solution_code, cases)
    replaced = edit(document, cases)
    return json.dumps(replaced if replaced is not None else document).encode()


def raised_at(
    call: int, message: str, type_name: str = "ValueError", grad_none: bool = False
) -> DocumentEdit:
    def edit(document: dict[str, Any], cases: list[CaseSpec]) -> None:
        case = document["cases"][-1]
        case["records"] = case["records"][: call - 1]
        case["error"] = {**error_record(message, type_name), "grad_none": grad_none}

    return edit


def set_in_records(field: str, value: Any, call: int = 1) -> DocumentEdit:
    def edit(document: dict[str, Any], cases: list[CaseSpec]) -> None:
        for case in document["cases"]:
            case["records"][call - 1][field] = value

    return edit


def weights_from(cases: list[CaseSpec]) -> DocumentEdit:
    """Each hidden case's weights replaced by numbers spelling its own seed and learning rate."""

    def edit(document: dict[str, Any], specs: list[CaseSpec]) -> None:
        for case, spec in zip(document["cases"], specs, strict=True):
            for record in case["records"]:
                record["weight"][0][0] = float(spec.seed)
                record["weight"][-1][-1] = spec.lr

    return edit


TRAIN_STEP = get_exercise("train-step")
SEED = next(c.seed for c in TRAIN_STEP.cases if c.hidden)

# channel -> (the hidden group's RunResult, as hostile code would leave it)
CHANNELS: dict[str, Callable[[Exercise], RunResult]] = {
    "exception message": lambda e: result(payload=hidden_run(e, raised_at(2, leak(e)))),
    "exception type name": lambda e: result(
        payload=hidden_run(e, raised_at(1, "x", type_name=f"{MARK}_seed_{SEED}"))
    ),
    "grad-none message": lambda e: result(
        payload=hidden_run(e, raised_at(1, f"'NoneType' {leak(e)}", "AttributeError", True))
    ),
    "SyntaxError fields": lambda e: result(
        payload=json.dumps(
            {"status": "syntax-error", "line": SEED, "message": leak(e), "text": leak(e)}
        ).encode()
    ),
    "load-time exception": lambda e: result(
        payload=json.dumps(
            {"status": "load-error", "error": error_record(leak(e), f"{MARK}Error", SEED)}
        ).encode()
    ),
    "missing function": lambda e: result(payload=b'{"status": "missing-function"}'),
    "exit status": lambda e: result(exit_code=SEED, payload=b""),
    "signal": lambda e: result(exit_code=None, signal=SEED % 64, payload=b""),
    "unreadable payload": lambda e: result(payload=leak(e).encode()),
    "number of records": lambda e: result(
        payload=hidden_run(e, lambda d, c: d["cases"][-1]["records"].pop())
    ),
    "printed output": lambda e: harness_result(
        e, e.solution_code, groups(e)[1], stdout=leak(e).encode(), stderr=leak(e).encode()
    ),
    "NaN at a chosen call": lambda e: result(
        payload=hidden_run(e, set_in_records("loss", float("nan"), call=2))
    ),
    "a huge value spelling the seed": lambda e: result(
        payload=hidden_run(e, set_in_records("loss", SEED * 1e20))
    ),
    "an int too large for a float": lambda e: result(
        payload=hidden_run(e, lambda d, c: None).replace(
            b'"loss": ', b'"loss": 1' + b"0" * 400 + b', "x": ', 1
        )
    ),
    "a type name in a record": lambda e: result(
        payload=hidden_run(e, set_in_records("loss_type", f"{MARK}{SEED}"))
    ),
    "weights spelling the case": lambda e: result(
        payload=hidden_run(e, weights_from(groups(e)[1]))
    ),
    "wall clock": lambda e: result(timed_out=True, stdout=leak(e).encode()),
    "CPU": lambda e: result(cpu_time_exceeded=True),
    "memory": lambda e: result(memory_exceeded=True),
    "output": lambda e: result(output_truncated=True, stdout=leak(e).encode()),
    "processes": lambda e: result(process_limit_exceeded=True),
    "result channel": lambda e: result(payload_truncated=True, payload=leak(e).encode()),
}


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_no_channel_from_the_hidden_run_reaches_the_report(channel: str) -> None:
    visible, hidden = groups(TRAIN_STEP)
    runs = [
        (visible, harness_result(TRAIN_STEP, TRAIN_STEP.solution_code, visible)),
        (hidden, CHANNELS[channel](TRAIN_STEP)),
    ]
    report = grade_runs(TRAIN_STEP, runs, GRADING_LIMITS)
    assert_conceals(TRAIN_STEP, report)
    if channel == "printed output":
        assert report.diagnosis == "correct"
        return
    assert report.score < TRAIN_STEP.max_score
    failing = [c for c in report.checks if not c.passed]
    fixed = set(HIDDEN_FAILURES.values()) | {HIDDEN_CHECK_FAILURE}
    # A failed run is said once, in the feedback's facts; its runs check only points there.
    said = report.facts if failing[0].message == RUN_FAILED else failing[0].message
    assert said in fixed, said


def test_a_loop_that_steps_as_often_as_a_hidden_seed_is_not_counted_aloud() -> None:
    exercise = get_exercise("fix-the-loop")
    visible, hidden = groups(exercise)
    limit = training_loop.record_limit(hidden[0])

    def step_seed_times(document: dict[str, Any], cases: list[CaseSpec]) -> None:
        for case, spec in zip(document["cases"], cases, strict=True):
            records = case["records"]
            case["records"] = (records * limit)[: spec.seed % limit]
            case["final"]["losses"] = [0.5] * (spec.seed % limit)

    runs = [
        (visible, harness_result(exercise, exercise.solution_code, visible)),
        (hidden, result(payload=hidden_run(exercise, step_seed_times))),
    ]
    report = grade_runs(exercise, runs, GRADING_LIMITS)
    assert_conceals(exercise, report)
    assert not next(c for c in report.checks if c.id == "step-count").passed


def test_a_type_name_returned_in_a_hidden_case_is_not_shown() -> None:
    exercise = get_exercise("prove-accumulation")
    visible, hidden = groups(exercise)
    runs = [
        (visible, harness_result(exercise, exercise.solution_code, visible)),
        (hidden, result(payload=hidden_run(exercise, set_in_records("result_type", MARK)))),
    ]
    report = grade_runs(exercise, runs, GRADING_LIMITS)
    assert_conceals(exercise, report)
    assert next(c for c in report.checks if c.id == "returns-pair").hidden


def test_a_check_failing_in_visible_and_hidden_cases_shows_only_the_visible_finding() -> None:
    visible, hidden = groups(TRAIN_STEP)
    bug = (TRAIN_STEP.variants[0]).source
    runs = [
        (visible, harness_result(TRAIN_STEP, bug, visible)),
        (hidden, harness_result(TRAIN_STEP, bug, hidden)),
    ]
    report = grade_runs(TRAIN_STEP, runs, GRADING_LIMITS)
    assert_conceals(TRAIN_STEP, report)
    match = next(c for c in report.checks if c.id == "weights-match")
    assert match.message.startswith("In case `")
    assert match.message.endswith("It fails in a hidden case too.")


# Through the real sandbox: hostile code that reads the hidden cases and sends them back.
SANDBOX_LIMITS = Limits(wall_timeout_seconds=120.0, cpu_seconds=60.0)
READS_CASES = """
    import json, os, sys, threading, time

    def cases_being_run():
        # The harness's own frames hold the cases it runs the learner's code on.
        frame = sys._getframe()
        while frame is not None:
            if isinstance(frame.f_locals.get("specs"), list):
                return frame.f_locals["specs"]
            frame = frame.f_back
        raise AssertionError("no cases found in the harness's frames")

    CASES = cases_being_run()
    IN_HIDDEN = any(case["seed"] not in (0, 1) for case in CASES)
    SECRET = "LEAK " + json.dumps(CASES)
"""
CORRECT = TRAIN_STEP.solution_code
# The module is loaded once, before the visible cases: in the hidden ones, code acts from the
# function the harness calls, where the cases are in the harness's frames too.
HOSTILE_STEP = """
correct_step = train_step


def train_step(model, optimizer, loss_fn, x, y):
    cases = cases_being_run()
    if any(case["seed"] not in (0, 1) for case in cases):
        secret = "LEAK " + json.dumps(cases)
        {attack}
    return correct_step(model, optimizer, loss_fn, x, y)
"""
HOSTILE = {
    "an exception built from the hidden cases": ("raise RuntimeError(secret)", "runtime-error"),
    "a SyntaxError whose text is the hidden cases": (
        "raise SyntaxError(secret, ('x', 17, 1, secret))",
        "runtime-error",
    ),
    "an exception class named after the seeds": (
        "raise type('seed_' + '_'.join(str(c['seed']) for c in cases), (Exception,), {})()",
        "runtime-error",
    ),
    "an exit status that is the seed": (
        "print(secret)\n        os._exit(cases[0]['seed'] % 256)",
        "runtime-error",
    ),
}
# The hidden cases are given to the run once the harness asks for them (fd 5), on its stdin,
# after all the run wrote before is in: asking first, or reading them as they come, only moves
# the learner's output to the part after the request, which is never shown.
ASKS = {
    "asks for them while loading and prints them": (
        "if not IN_HIDDEN:\n    os.write(5, b'?')\n    print(MARK, sys.stdin.read(), flush=True)\n",
        "runtime-error",  # the visible cases' trace never came before the request
    ),
    "a thread that asks for them while the visible cases run": (
        "def ask():\n    os.write(5, b'?')\n    print(MARK, sys.stdin.read(), flush=True)\n"
        "if not IN_HIDDEN:\n    threading.Thread(target=ask).start()\n",
        "runtime-error",
    ),
    "a thread printing the hidden cases the moment the harness holds them": (
        "def spy():\n"
        "    while True:\n"
        "        for frame in list(sys._current_frames().values()):\n"
        "            while frame is not None:\n"
        "                if isinstance(frame.f_locals.get('later_cases'), list):\n"
        "                    print(MARK, frame.f_locals['later_cases'], flush=True)\n"
        "                    sys.stderr.write(MARK)\n"
        "                    return\n"
        "                frame = frame.f_back\n"
        "        time.sleep(0.001)\n"
        "if not IN_HIDDEN:\n    threading.Thread(target=spy, daemon=True).start()\n",
        "correct",  # nothing of it changes the steps; what it printed is not shown
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_in_the_sandbox_cannot_send_the_hidden_cases_back(
    name: str, grading_runner: sandbox.Runner
) -> None:
    attack, diagnosis = HOSTILE[name]
    source = textwrap.dedent(READS_CASES) + CORRECT + HOSTILE_STEP.replace("{attack}", attack)
    report = grade("train-step", source, limits=SANDBOX_LIMITS, runner=grading_runner)
    assert report.diagnosis == diagnosis, report.feedback
    assert_conceals(TRAIN_STEP, report)
    assert report.facts == HIDDEN_FAILURES[diagnosis]


@pytest.mark.parametrize("name", sorted(ASKS))
def test_asking_for_the_hidden_cases_or_echoing_them_shows_none_of_them(
    name: str, grading_runner: sandbox.Runner
) -> None:
    attack, diagnosis = ASKS[name]
    source = textwrap.dedent(READS_CASES) + f"MARK = {MARK!r}\n" + attack + CORRECT
    report = grade("train-step", source, limits=SANDBOX_LIMITS, runner=grading_runner)
    assert report.diagnosis == diagnosis, report.feedback
    assert_conceals(TRAIN_STEP, report)
    # The attack works: the hidden cases reach its output, but only in the part never shown.
    visible, hidden = groups(TRAIN_STEP)
    run = _run(grading_runner, TRAIN_STEP, source, visible, hidden, SANDBOX_LIMITS)
    assert run.after_request is not None
    assert hidden[0].id in run.after_request.stdout.decode()
    assert MARK.encode() not in run.stdout + run.stderr + run.payload


# Code that does not load is reported as the visible failure it is; the hidden cases are never
# asked for, so a load that blocks or costs is not paid twice.
NOT_LOADING = {
    "an exception while loading": ("raise RuntimeError('at import')\n", "runtime-error"),
    "an exit while loading": ("import sys\nsys.exit(3)\n", "runtime-error"),
    "no entry point": ("def not_the_entry_point():\n    return 0\n", "missing-function"),
    "a syntax error": ("def train_step(:\n", "syntax-error"),
}


@pytest.mark.parametrize("name", sorted(NOT_LOADING))
def test_code_that_does_not_load_is_run_once_and_told_as_a_visible_failure(
    name: str, grading_runner: sandbox.Runner
) -> None:
    source, diagnosis = NOT_LOADING[name]
    visible, hidden = groups(TRAIN_STEP)
    run = _run(grading_runner, TRAIN_STEP, source, visible, hidden, SANDBOX_LIMITS)
    assert run.after_request is None
    assert json.loads(run.payload)["status"] != "ran"
    report = grade("train-step", source, limits=SANDBOX_LIMITS, runner=grading_runner)
    assert report.diagnosis == diagnosis, report.feedback
    assert report.facts not in HIDDEN_FAILURES.values()
