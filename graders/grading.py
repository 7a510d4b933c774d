"""grade(exercise, source): run the learner's code in the sandbox, judge it outside.

One idea over 400 lines: one run of the learner's code judged, from the sandbox's result to the
report.

The sandbox returns a trace: untrusted numbers. Every verdict is made here, by comparing those
numbers with trajectories that this process computes itself from the same fixed-seed cases:
the reference solution's and those of the known buggy loops. Nothing the sandbox says about
itself (a pass, a score, a comparison) is ever read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import sandbox
from graders import diagnoses, diagnosis, fitting, harness, judging, starter
from graders.claims import TEXTBOOK_ORDER
from graders.diagnoses import Declared, Hint
from graders.diagnosis import diagnose
from graders.exercise import CaseSpec, Exercise
from graders.feedback import SEE_CHECK, error_concept, render
from graders.fix_replay import with_fix
from graders.judging import check
from graders.kinds import KINDS, SANDBOX_PROGRAM, kind_of
from graders.quoting import learner_text
from graders.report import Check, Diagnosis, GradeReport, PlotSeries
from graders.sentences import Sentence, words_of
from graders.starter import behaves_as_starter, is_starter_source, not_started_report
from graders.trace import (
    MAX_MAGNITUDE,
    AnyTrace,
    CaseTrace,
    InvalidTrace,
    LoadError,
    MissingFunction,
    NonFiniteValue,
    SyntaxErrorTrace,
    parse_trace,
)
from sandbox import Limits, PoolProgram, Runner, RunResult

log = logging.getLogger(__name__)

# The known buggy loops this process replays (trusted code, never the learner's) step their
# scheduler before their optimizer on purpose: torch's warning about it tells an operator
# nothing. Learner code runs in the sandbox, where the warning still reaches its output.
warnings.filterwarnings(
    "ignore",
    message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`",
    category=UserWarning,
)

# CPU caps, set-up apart, and a wall-clock backstop well above them (sandbox/limits.py): a busy
# machine slows a run down, it does not change its grade.
GRADING_LIMITS = Limits()
MAX_OUTPUT_CHARS = 8000
# What a warm pool's zygotes run once before forking (sandbox.pool): a trusted loop on a tiny
# made-up case, so that the optimizer's lazy imports are done. It is in every child's memory,
# so it is nothing of any exercise: no case, no reference, no expected value.
WARM_UP_SOURCE = """
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
"""
WARM_UP_REQUEST = {
    "kind": "step-function",
    "entry_point": "train_step",
    "cases": [
        {"id": "warm-up", "seed": 0, "in_features": 2, "out_features": 1, "batch_size": 2,
         "steps": 2, "lr": 0.1, "momentum": 0.9}
    ],
}  # fmt: skip
POOL_PROGRAM = PoolProgram(
    source=SANDBOX_PROGRAM,
    warm_up_inputs={
        harness.SUBMISSION_FILENAME: WARM_UP_SOURCE.encode(),
        harness.CASES_FILENAME: json.dumps(WARM_UP_REQUEST).encode(),
    },
)


# The hidden cases' own budget (docs/security.md#the-time-a-grading-takes). Learner code knows
# them only in the part of its run after the request (sandbox/supervise.py), so how long that
# part takes is all that time can tell of them. It is held to a multiple of the reference's CPU
# time on them, with floors a correct solution stays far below on a busy machine, in CPU and in
# wall time not spent waiting for a core, and nobody learns of the grading before its start plus
# the first of a few coarse delays (`release_delay`) that covers it: anything up to the first
# delay looks the same from outside.
HIDDEN_BUDGET_MULTIPLE = 10
RELEASE_DELAY_FLOOR_SECONDS = 0.25
# Each delay is RELEASE_DELAY_FACTOR times the one before (0.25, 2, 16 s at the floor); the
# last is the part's wall budget.
RELEASE_DELAY_FACTOR = 8
RELEASE_DELAYS = 3
# On an idle machine code can stretch its part up to the unwaited budget plus the CPU budget
# (sleeping, then making its own threads wait for each other): twice the CPU budget. At this
# floor (0.875 s) that span is no longer than the one between the first two delays, so whatever
# the grading's fixed costs around the part, its code can choose between two delays at most.
# The factor is what leaves the floor room: a loaded machine stalls a correct part for tenths
# of a second in ways no reading sees (a factor of 4 made the floor 0.375 s, and CI saw a
# correct part stopped at it).
HIDDEN_CPU_FLOOR_SECONDS = (RELEASE_DELAY_FACTOR - 1) * RELEASE_DELAY_FLOOR_SECONDS / 2
# The grading's own costs after the hidden part on an idle machine (the sandbox's exit, reading
# and judging the traces: 0.02-0.06 s measured), added to the part's work when the delay is
# chosen: so on an idle machine a report is ready by its delay, whatever the code did.
JUDGING_ALLOWANCE_SECONDS = 0.1


@dataclass(frozen=True)
class HiddenBudget:
    """What the part of a run with the hidden cases may take, and the delays it is seen at."""

    cpu_seconds: float
    first_delay_seconds: float

    @classmethod
    def of_reference(cls, reference_seconds: float) -> HiddenBudget:
        """The budget for hidden cases that take the reference `reference_seconds` of CPU."""
        multiple = HIDDEN_BUDGET_MULTIPLE * reference_seconds
        return cls(
            cpu_seconds=max(HIDDEN_CPU_FLOOR_SECONDS, multiple),
            first_delay_seconds=max(RELEASE_DELAY_FLOOR_SECONDS, multiple),
        )

    @property
    def delays_seconds(self) -> list[float]:
        return [self.first_delay_seconds * RELEASE_DELAY_FACTOR**n for n in range(RELEASE_DELAYS)]

    @property
    def unwaited_wall_seconds(self) -> float:
        """The part's wall time not spent waiting for a core: the CPU budget's figure. The
        reference's hidden part only computes, so its wall time, waits apart, is its CPU time;
        the multiple's room covers the harness's reading and writing around it."""
        return self.cpu_seconds

    @property
    def wall_seconds(self) -> float:
        """A backstop: beyond the last delay the part is stopped however long it waited for a
        core (where the waits cannot be seen, gVisor, it is the only wall budget)."""
        return self.delays_seconds[-1]

    def limits(self, limits: Limits) -> Limits:
        """`limits` with this budget for the part after the request (or theirs, if tighter)."""
        return dataclasses.replace(
            limits,
            later_cpu_seconds=min(limits.later_cpu_seconds, self.cpu_seconds),
            later_unwaited_wall_seconds=min(
                limits.later_unwaited_wall_seconds, self.unwaited_wall_seconds
            ),
            later_wall_timeout_seconds=min(limits.later_wall_timeout_seconds, self.wall_seconds),
        )

    def release_delay(self, work_seconds: float) -> float:
        """The first delay that covers `work_seconds` (the hidden part's own work and the
        grading's costs after it, `release_after`), or that itself past all."""
        return next((d for d in self.delays_seconds if d >= work_seconds), work_seconds)

    def release_after(self, part: RunResult, ready_seconds: float) -> float:
        """How long after the hidden part's start its grading may be known: the delay chosen
        from the part's own work (`own_work_seconds`) with the grading's costs after it
        (`JUDGING_ALLOWANCE_SECONDS`), never from the server's load; a report ready only
        `ready_seconds` after the start, later than that (a loaded server), at the first
        multiple of that delay after it."""
        delay = self.release_delay(own_work_seconds(part) + JUDGING_ALLOWANCE_SECONDS)
        return delay * max(1, math.ceil(ready_seconds / delay))


def own_work_seconds(part: RunResult) -> float:
    """What the part's own work can stretch its wall time to: its wall time not spent waiting
    for a core, plus its CPU time (a task waits only while another holds the core: on an idle
    machine, the part's own tasks, whose CPU counts); as the sandbox measured them, so the
    machine's load moves it little. Where the waits cannot be seen (gVisor), its wall time."""
    if part.waited_seconds is None:
        return part.wall_seconds
    return part.wall_seconds - part.waited_seconds + part.cpu_seconds


_budgets: dict[tuple[str, str], HiddenBudget] = {}


def hidden_budget(exercise: Exercise) -> HiddenBudget:
    """The hidden cases' budget, from the reference's CPU time on them (measured here once per
    exercise version: a learner's own cases are of the same sizes)."""
    key = (exercise.id, exercise.version)
    budget = _budgets.get(key)
    if budget is None:
        function = harness.load_function(exercise.solution_code, exercise.entry_point, "trusted.py")
        record = kind_of(exercise).record
        hidden = [spec.harness_spec() for spec in exercise.cases if spec.hidden]
        times = []
        for _ in range(2):  # the first pays torch's lazy imports and first calls
            started = time.thread_time()
            for spec in hidden:
                harness.run_case(record, function, spec, "trusted.py")
            times.append(time.thread_time() - started)
        budget = _budgets[key] = HiddenBudget.of_reference(min(times))
    return budget


@dataclass(frozen=True)
class Graded:
    """A grading's report, and when (time.monotonic()) it may be stored and shown: not before
    its hidden part's start plus the release delay that covers it (`HiddenBudget`)."""

    report: GradeReport
    release_at: float
    hidden_started_at: float | None = None  # None: the hidden cases were never given


@dataclass(frozen=True)
class Failure:
    """A learner-caused failure: the run could not be judged step by step."""

    diagnosis: Diagnosis
    message: str


def grade_exercise(
    exercise: Exercise, source: str, limits: Limits | None = None, runner: Runner | None = None
) -> Graded:
    """Grade one submission of an exercise as this learner is graded on it
    (`graders.exercise.for_learner`); learner mistakes are reports, never exceptions.

    `runner` is the server's (opened once at start-up); without one, a cold runner is chosen
    from the environment. Raises GraderFault when the exercise or the grader is at fault, and
    sandbox.SandboxUnavailable when this host cannot run untrusted code safely (server faults,
    not the learner's).
    """
    install_diagnoses()
    if is_starter_source(exercise, source):
        return Graded(not_started_report(exercise), time.monotonic())
    budget = hidden_budget(exercise)
    limits = budget.limits(limits or GRADING_LIMITS)
    runner = runner or sandbox.open_runner(os.environ.get("LOOPGRADE_SANDBOX", "auto"))
    first, *later = case_groups(exercise)
    result = _run(runner, exercise, source, first, later[0] if later else None, limits)
    runs = [(first, result)]
    if later:
        runs.append((later[0], result.after_request or NEVER_ASKED))
    report = grade_runs(exercise, runs, limits)
    # Whatever the verdict (a visible failure's too: the hidden part ran in the same run),
    # the moment the report is ready says how long the hidden part took: it is released later.
    ready = time.monotonic()
    hidden = result.after_request
    if hidden is None or hidden.started_monotonic is None:
        return Graded(report, ready)  # the hidden cases were never given
    after = budget.release_after(hidden, ready - hidden.started_monotonic)
    return Graded(report, hidden.started_monotonic + after, hidden.started_monotonic)


def judge_visible_trace(exercise: Exercise, payload: bytes) -> GradeReport:
    """The report on the visible cases alone of a trace the harness recorded elsewhere
    (`loopgrade-client check` runs it on the learner's computer): this grader's own judging,
    diagnosis and words for those cases. The trace is hostile data, read as a sandbox's is;
    no hidden case takes part, and the report is shown, never stored or scored."""
    visible = [case for case in exercise.cases if not case.hidden]
    # Its own version: the trusted trajectories cached for it are of the visible cases alone.
    part = exercise.model_copy(update={"cases": visible, "version": f"{exercise.version}+visible"})
    result = dataclasses.replace(NEVER_ASKED, exit_code=0, payload=payload)
    return grade_runs(part, [(visible, result)], GRADING_LIMITS)


def case_groups(exercise: Exercise) -> list[list[CaseSpec]]:
    """The groups of cases a grading runs apart: the visible ones, then the hidden ones."""
    return [
        cases
        for hidden in (False, True)
        if (cases := [c for c in exercise.cases if c.hidden == hidden])
    ]


def grade_runs(
    exercise: Exercise, runs: Sequence[tuple[list[CaseSpec], RunResult]], limits: Limits
) -> GradeReport:
    """Judge what the sandbox returned for each group of cases (visible, then hidden).

    Everything in a RunResult is untrusted. This is the one place where a hidden group is
    concealed: its output is dropped, and a failure in it is told by its class alone
    (`HIDDEN_FAILURES`), never with a message, name, number or text that its run produced.
    Checks over hidden cases are concealed the same way in `judging.check`.
    """
    output = "".join(
        (result.stdout + result.stderr).decode(errors="replace")
        for cases, result in runs
        if not cases[0].hidden
    )[:MAX_OUTPUT_CHARS]
    traces: dict[str, CaseTrace] = {}
    for cases, result in runs:
        try:
            failure = _run_failure(exercise, cases, result, limits, traces)
        except Exception:  # reading the learner's run: theirs, like judging it (below)
            log.exception("exercise=%s reading the learner's trace failed", exercise.id)
            failure = UNJUDGEABLE
        if failure is not None:
            if cases[0].hidden:
                failure = Failure(failure.diagnosis, hidden_failure_message(failure.diagnosis))
            return failure_report(exercise, failure, output)
    trusted = trusted_trajectories(exercise)  # trusted code: a failure here is the server's
    try:
        return judged(exercise, traces, output)
    except Exception:
        # The learner's numbers made judging fail only if the reference's own pass: else the
        # exercise's configuration or the grader's code is at fault (GraderFault, not theirs).
        check_judging_sound(exercise, trusted["reference"])
        log.exception("exercise=%s judging the learner's traces failed", exercise.id)
        return failure_report(exercise, UNJUDGEABLE, output)


class GraderFault(Exception):
    """Judging fails on trusted input (the reference's own run): the exercise's configuration
    or the grader's code is wrong. The server's fault: the submission's status is `error`,
    never a learner's score; it is graded again once the fault is fixed (a regrade)."""


def check_judging_sound(exercise: Exercise, reference: dict[str, CaseTrace]) -> None:
    """Raise GraderFault when judging the reference's trajectories raises."""
    try:
        judge(exercise, reference)
    except Exception as exc:
        raise GraderFault(
            f"exercise {exercise.id} (version {exercise.version}) cannot judge its own "
            f"reference: {type(exc).__name__}: {exc}"
        ) from exc


def hidden_failure_message(diagnosis: Diagnosis) -> str:
    """What a learner is told of a failure in a hidden case: its class, nothing else."""
    return HIDDEN_FAILURES.get(diagnosis, HIDDEN_FAILURES["runtime-error"])


HIDDEN_FAILURES: dict[Diagnosis, str] = {
    "timeout": "Your code ran out of time in a hidden case and was stopped.",
    "memory-limit": "Your code used too much memory in a hidden case and was stopped.",
    "output-limit": "Your code printed too much in a hidden case and was stopped.",
    "grad-none-error": "Your code reached for a `.grad` that was `None` in a hidden case.",
    "non-finite-value": "Your code produced a value that is not a finite number in a hidden case.",
    "syntax-error": "Your code could not be loaded in a hidden case.",
    "missing-function": "Your code could not be loaded in a hidden case.",
    "runtime-error": (
        "Your code raised an exception, ended early or hit a limit in a hidden case. Hidden "
        "cases show no details: make your code correct on the visible ones, whatever the "
        "shapes, seed and learning rate."
    ),
}
UNJUDGEABLE = Failure(
    "incorrect",
    "The values your code produced could not be judged: they are not what a training step "
    "on these cases produces.",
)


def _run_failure(
    exercise: Exercise,
    cases: list[CaseSpec],
    result: RunResult,
    limits: Limits,
    traces: dict[str, CaseTrace],
) -> Failure | None:
    """The learner-caused failure one run shows, if any; else its cases' traces go in `traces`."""
    failure = _cap_failure(result, limits)
    if failure is not None:
        return failure
    try:
        trace = parse_trace(result.payload, kind_of(exercise).trace, cases)
    except NonFiniteValue as exc:
        return non_finite_failure(exc)
    except InvalidTrace as exc:
        log.info("exercise=%s invalid trace: %s", exercise.id, exc)
        return Failure("runtime-error", _early_exit_message(result))
    return trace_failure(exercise, trace, cases, traces)


def non_finite_failure(error: NonFiniteValue) -> Failure:
    """A NaN, an infinity or a blown-up value, said where it is (a visible case's words)."""
    return Failure(
        "non-finite-value",
        f"In case `{error.case}`, {error.where} is {error.value:g}: not a finite number of "
        f"sensible size (NaN, an infinity, or beyond ±{MAX_MAGNITUDE:g}).",
    )


def _run(
    runner: Runner,
    exercise: Exercise,
    source: str,
    cases: list[CaseSpec],
    later_cases: list[CaseSpec] | None,
    limits: Limits,
) -> RunResult:
    """One sandboxed run: `cases`, then `later_cases` (the hidden ones) given only once the
    harness asks, after all it wrote for the first is in (sandbox/supervise.py). Nothing the
    part before shows can depend on the hidden cases: that is what lets one run hold both."""
    request = {
        "kind": exercise.kind,
        "entry_point": exercise.entry_point,
        "cases": [c.harness_spec() for c in cases],
        "later_cases": later_cases is not None,
    }
    inputs = {
        harness.SUBMISSION_FILENAME: source.encode(),
        harness.CASES_FILENAME: json.dumps(request).encode(),
    }
    later_input = None
    if later_cases is not None:
        later_input = json.dumps(
            [c.harness_spec() for c in later_cases], separators=(",", ":")
        ).encode()
    result = runner.run(SANDBOX_PROGRAM, inputs, limits, later_input)
    _log_part(exercise, cases, result)
    if later_cases is not None and result.after_request is not None:
        _log_part(exercise, later_cases, result.after_request)
    return result


def _log_part(exercise: Exercise, cases: list[CaseSpec], part: RunResult) -> None:
    log.info(
        "sandbox run: exercise=%s cases=%s exit=%s signal=%s limit=%s wall=%.2fs waited=%s",
        exercise.id,
        ",".join(c.id for c in cases),
        part.exit_code,
        part.signal,
        part.limit_hit,
        part.wall_seconds,
        "-" if part.waited_seconds is None else f"{part.waited_seconds:.2f}s",
    )


# The part after the request, for a run that never asked for its hidden cases: no trace, so
# a hidden failure ("ended early"), told by its class alone like any other. Code that did not
# load never asks either; its visible failure is the one told.
NEVER_ASKED = RunResult(
    exit_code=None, signal=None, timed_out=False, cpu_time_exceeded=False, memory_exceeded=False,
    process_limit_exceeded=False, file_size_exceeded=False, open_files_exceeded=False,
    output_truncated=False, payload_truncated=False, wall_seconds=0.0, cpu_seconds=0.0,
    peak_memory_bytes=None, payload=b"", stdout=b"", stderr=b"",
)  # fmt: skip


def _cap_failure(result: RunResult, limits: Limits) -> Failure | None:
    if result.timed_out or result.cpu_time_exceeded:
        seconds = limits.wall_timeout_seconds if result.timed_out else limits.cpu_seconds
        kind = "wall-clock" if result.timed_out else "CPU"
        return Failure(
            "timeout",
            f"Your code hit the {kind} time limit of {seconds:g} s and was stopped.",
        )
    if result.memory_exceeded:
        return Failure(
            "memory-limit",
            f"Your code used more than {limits.memory_bytes // 2**20} MiB of memory "
            "and was stopped.",
        )
    if result.output_truncated:
        return Failure(
            "output-limit",
            f"Your code printed more than {limits.output_bytes // 1024} KiB and was stopped.",
        )
    others = {
        "process_limit_exceeded": f"started more than {limits.max_processes} processes",
        "file_size_exceeded": f"wrote a file larger than {limits.file_size_bytes // 2**20} MiB",
        "open_files_exceeded": f"opened more than {limits.open_files} files at once",
        "payload_truncated": "wrote too much on the grader's result channel",
    }
    for flag, what in others.items():
        if getattr(result, flag):
            return Failure("runtime-error", f"Your code {what} and was stopped.")
    return None


def _early_exit_message(result: RunResult) -> str:
    if result.signal is not None:
        how = f"was killed by signal {result.signal}"
    elif result.exit_code:
        how = f"exited with status {result.exit_code}"
    else:
        how = "ended the program early"
    return f"Your code {how} before every step was checked. Your function should return, not exit."


def _at_line(line: int | None) -> str:
    return f" (line {line} of your code)" if line else ""


# Code spans and fenced blocks (`learner_text`): learner text, never read for a line number.
_QUOTED = re.compile(r"(`+)(?:.|\n)*?\1")
_LINE_SAID = re.compile(r"^Line (\d{1,9}):|\(line (\d{1,9}) of your code\)")


def failure_line(message: str, source: str) -> int | None:
    """The line of `source` a failure's message names (`trace_failure`'s words), if any.

    Only the grader's own words are read, never quoted learner text, and only a line that
    `source` has is returned (a forged trace may name any number).
    """
    match = _LINE_SAID.search(_QUOTED.sub("", message))
    if match is None:
        return None
    line = int(match.group(1) or match.group(2))
    return line if 1 <= line <= source.count("\n") + 1 else None


def trace_failure(
    exercise: Exercise, trace: AnyTrace, cases: list[CaseSpec], traces: dict[str, CaseTrace]
) -> Failure | None:
    """The learner-caused failure a parsed trace shows, if any; else add its cases to `traces`."""
    if isinstance(trace, SyntaxErrorTrace):
        code_line = f"\n\n{learner_text(trace.text, block=True)}" if trace.text else ""
        return Failure(
            "syntax-error", f"Line {trace.line}: {learner_text(trace.message)}.{code_line}"
        )
    if isinstance(trace, MissingFunction):
        return Failure(
            "missing-function",
            f"No function named `{exercise.entry_point}` was found in your code. "
            f"Define it as `{exercise.signature}`.",
        )
    if isinstance(trace, LoadError):
        error = trace.error
        return Failure(
            "runtime-error",
            f"Your code raised {learner_text(error.type)} while it was being loaded"
            f"{_at_line(error.line)}: {learner_text(error.message)}",
        )
    for case, spec in zip(trace.cases, cases, strict=True):
        if case.error is not None:
            return _case_error(exercise, case, spec)
        traces[spec.id] = case
    return None


# Where the server installed Python and its packages: nothing of the learner's, and nothing
# they need to read a frame of torch's ("torch/nn/modules/linear.py" says as much).
_INSTALL_PATH = re.compile(r'File "[^"\n]*/(?:(?:site|dist)-packages|lib/python3\.\d+)/')


def without_install_paths(traceback: str) -> str:
    """A traceback with the server's install paths cut from its frames' file names."""
    return _INSTALL_PATH.sub('File "', traceback)


def _case_error(exercise: Exercise, case: CaseTrace, spec: CaseSpec) -> Failure:
    error = case.error
    assert error is not None
    namer = kind_of(exercise).failure_named
    named = None if error.grad_none or namer is None else namer(spec, case)
    step = len(case.records) + 1
    where = (
        f"In case `{spec.id}`, at call {step}, your code raised {learner_text(error.type)}"
        f"{_at_line(error.line)}: {learner_text(error.message)}\n\n"
        f"{learner_text(without_install_paths(error.traceback), block=True)}"
    )
    if named is not None:  # what the values before the error show, then where it was raised
        return Failure(named[0], f"{words_of(named[1])}\n\n{where}")
    concept = error_concept(error.message)
    if concept:
        where += f"\n\n{concept}"
    return Failure("grad-none-error" if error.grad_none else "runtime-error", where)


# A failed run is said once, in the feedback (its facts: the failure's message, which the page
# also reads for the line to mark); the checks only say they were not made.
RUN_FAILED_SAID = Sentence(
    "grading/run-failed", "The run did not finish: the feedback says where and why."
)
NOT_CHECKED = Sentence(
    "grading/not-checked", "Not checked: the run failed before its values could be judged."
)
RUN_FAILED = RUN_FAILED_SAID.text


def failure_report(exercise: Exercise, failure: Failure, output: str = "") -> GradeReport:
    """Score 0: the checks could not be made."""
    checks = [
        Check(
            id=check_id,
            passed=False,
            points=0,
            max_points=points,
            message=(RUN_FAILED_SAID if check_id == "runs" else NOT_CHECKED).text,
            said=(RUN_FAILED_SAID if check_id == "runs" else NOT_CHECKED)(),
        )
        for check_id, points in exercise.checks.items()
    ]
    return GradeReport(
        exercise=exercise.id,
        exercise_version=exercise.version,
        score=0,
        max_score=exercise.max_score,
        diagnosis=failure.diagnosis,
        checks=checks,
        feedback=render(failure.message, failure.diagnosis, exercise),
        facts=failure.message,
        output=output,
    )


def praised_calls(exercise: Exercise, traces: dict[str, CaseTrace]) -> list[str]:
    """The praise of the lesson's order, when every call of every visible case made it (a claim:
    `graders.claims.TEXTBOOK_ORDER`); "" for code that got its numbers another way (gradients
    from `torch.autograd.grad`, an update by hand) and for kinds that take no step."""
    if not kind_of(exercise).steps:
        return []
    calls = [
        record["calls"]
        for spec in exercise.cases
        if not spec.hidden
        for record in traces[spec.id].records
        if record is not None and "calls" in record
    ]
    return [TEXTBOOK_ORDER.key] if calls and all(map(TEXTBOOK_ORDER.holds, calls)) else []


# --- trusted trajectories -------------------------------------------------------------------

# Per exercise version, and per learner's cases for a per-learner exercise: so many of the
# latter are kept, the least recently used dropped (each costs a run of every known bug).
TRUSTED_CACHED = 256
_trusted_cache: OrderedDict[tuple[str, str, str], dict[str, dict[str, CaseTrace]]] = OrderedDict()
_trusted_lock = threading.Lock()


def trusted_trajectories(exercise: Exercise) -> dict[str, dict[str, CaseTrace]]:
    """Reference and known-bug trajectories for every case, keyed 'reference' or variant id.

    Computed in this process from the exercise's own files, once per exercise version. The
    starter's are under 'starter': a submission that behaves as it does is not started.
    """
    key = (exercise.id, exercise.version, exercise.learner_variant)
    cached = _trusted_cache.get(key)  # once computed, read without waiting for the lock
    if cached is not None:
        return cached
    with _trusted_lock:
        if key not in _trusted_cache:
            sources = {"reference": exercise.solution_code, "starter": exercise.starter_code}
            sources.update({variant.id: variant.source for variant in exercise.variants})
            _trusted_cache[key] = {
                name: trusted_run(exercise, source) for name, source in sources.items()
            }
            while len(_trusted_cache) > TRUSTED_CACHED:
                _trusted_cache.popitem(last=False)
        _trusted_cache.move_to_end(key)
        return _trusted_cache[key]


def trusted_run(exercise: Exercise, source: str) -> dict[str, CaseTrace]:
    """Run trusted code (a reference or a known bug) on every case, here, unsandboxed."""
    function = harness.load_function(source, exercise.entry_point, "trusted.py")
    record = kind_of(exercise).record
    return {
        spec.id: CaseTrace.model_validate(
            harness.run_case(record, function, spec.harness_spec(), "trusted.py")
        )
        for spec in exercise.cases
    }


# --- judging --------------------------------------------------------------------------------


# Judging is a function of the exercise version and the traces alone, and most wrong
# submissions are a few common bugs whose fixed-seed numbers are the same to the bit: their
# diagnosis (replaying and fitting loops, most of a grade's CPU in this process) is made once.
# Held by a digest of the traces (never the traces: up to `payload_bytes` each), and copied
# out, so that no caller can change what the next one gets.
JUDGMENTS_CACHED = 512
_judgments: OrderedDict[tuple[str, str, str, bytes], GradeReport] = OrderedDict()
_judgments_lock = threading.Lock()


def judged(exercise: Exercise, traces: dict[str, CaseTrace], output: str = "") -> GradeReport:
    """judge(), made once for the same exercise version and the same recorded values."""
    recorded = b"\0".join(traces[spec.id].model_dump_json().encode() for spec in exercise.cases)
    key = (
        exercise.id,
        exercise.version,
        exercise.learner_variant,
        hashlib.sha256(recorded).digest(),
    )
    with _judgments_lock:
        report = _judgments.get(key)
        if report is not None:
            _judgments.move_to_end(key)
    if report is None:
        report = judge(exercise, traces)
        with _judgments_lock:
            _judgments[key] = report
            while len(_judgments) > JUDGMENTS_CACHED:
                _judgments.popitem(last=False)
    return report.model_copy(update={"output": output}, deep=True)


def judge(exercise: Exercise, traces: dict[str, CaseTrace], output: str = "") -> GradeReport:
    """Score, diagnose and explain the learner's traces of every case of the exercise."""
    kind = kind_of(exercise).judge
    trusted = trusted_trajectories(exercise)
    if behaves_as_starter(exercise, traces, trusted["starter"]):
        return not_started_report(exercise, output)
    reference = trusted["reference"]
    findings = [
        kind.judge_case(spec, traces[spec.id], reference[spec.id]).as_reported()
        for spec in exercise.cases
    ]
    checks = [
        check(check_id, points, kind.checks[check_id], findings)
        for check_id, points in exercise.checks.items()
    ]
    verdict = diagnose(exercise, traces, trusted, checks)
    first_failure = next((c.id for c in checks if not c.passed), None)
    claims = praised_calls(exercise, traces) if verdict.diagnosis == "correct" else []
    if first_failure is not None and verdict.diagnosis == "incorrect":
        # No diagnosis explains it: the feedback points at the check, which says what differs
        # (said once, in the checks table, not repeated here).
        claims.insert(0, f"{SEE_CHECK}:{first_failure}")
    claims += verdict.said
    facts = "\n\n".join(words_of(said) for said in verdict.facts)
    plots: list[PlotSeries] = [
        plot
        for spec in exercise.cases
        if not spec.hidden
        for plot in kind.plots(spec, traces[spec.id], reference[spec.id])
    ]
    # The learner's loop with the named mistake fixed, one more line on their visible charts.
    plots = with_fix(kind_of(exercise), exercise, traces, reference, verdict.diagnosis, plots)
    return GradeReport(
        exercise=exercise.id,
        exercise_version=exercise.version,
        score=sum(c.points for c in checks),
        max_score=exercise.max_score,
        diagnosis=verdict.diagnosis,
        other_diagnoses=list(verdict.also),
        checks=checks,
        feedback=render(facts, verdict.diagnosis, exercise, claims),
        facts=facts,
        facts_said=list(verdict.facts),
        claims=claims,
        plots=plots,
        output=output,
    )


# The diagnoses this module gives (graders.diagnoses).
DECLARED: tuple[Declared, ...] = (
    Declared(
        code="syntax-error",
        name="Syntax error",
        words="Python could not read your code. Fix the line named above and submit again.",
        hint=Hint(
            where="Look at the line the error names, and the line just before it.",
            what=(
                "Python could not read the code: a bracket, colon or indentation is wrong, so "
                "nothing ran."
            ),
            fix=(
                "Every block opens with a colon and is indented the same way, and every "
                "bracket closes:\n\n"
            )
            + """```python
for x, y in batches:
    loss = loss_fn(model(x), y)
```""",
        ),
    ),
    Declared(
        code="missing-function",
        name="Function not found",
        words="The function the exercise asks for is not defined in your code.",
        hint=Hint(
            where="Look at the name of the function you define.",
            what=(
                "The grader calls the function by the name the exercise gives; your code "
                "defines no function with that name."
            ),
            fix=(
                "Define the function with exactly the name and parameters in the exercise's "
                "signature, at the top level of your code."
            ),
        ),
    ),
    Declared(
        code="runtime-error",
        name="Error while running",
        words="Your code raised an exception, so what it does could not be checked.",
        hint=Hint(
            where=(
                "Look at the traceback's first frame in your code: it names the line your code "
                "was on when the error was raised. The frames below it are what your code "
                "called (torch's own), and the last line names the error."
            ),
            what=(
                "Your code raised an error while it ran, so the checks after it could not pass. "
                "The traceback says which line and why."
            ),
            fix=(
                "Fix the line the traceback names; run it on a small example in the practice "
                "kit or a notebook before you submit."
            ),
        ),
    ),
    Declared(
        code="grad-none-error",
        name="Gradient is None",
        words=(
            "Your code reached for `.grad` when it was `None`. `.grad` is `None` until a "
            "`backward()` fills it, and again after `zero_grad()`, which since PyTorch 2.0 "
            "releases the gradient tensors rather than filling them with zeros. So either no "
            "`backward()` had filled it yet, or it had been cleared. Read `.grad` after "
            "`backward()`, or check for `None` first (`if p.grad is not None`); to clear into "
            "tensors of zeros instead, `optimizer.zero_grad(set_to_none=False)`."
        ),
        said_in={
            "without-steps": (
                "Your code reached for `.grad` when it was `None`. A gradient is `None` until a "
                "backward pass fills it, and again once it is released (since PyTorch 2.0, "
                "clearing releases it). Check for `None` before using it: `if p.grad is not "
                "None`."
            ),
        },
        hint=Hint(
            where="Look at every line that reads or changes a parameter's `.grad`.",
            what=(
                "A parameter's `.grad` is `None` until a backward pass fills it, and "
                "`optimizer.zero_grad()` sets it back to `None`. Code that treats it as a "
                "tensor fails."
            ),
            fix="""Let the optimizer clear the gradients, or check for `None` before using `.grad`:

```python
optimizer.zero_grad()  # instead of p.grad.zero_()
for p in model.parameters():
    if p.grad is not None:
        ...
```""",
        ),
    ),
    Declared(
        code="timeout",
        name="Time limit reached",
        words=(
            "Your code ran out of time. What this exercise asks takes milliseconds on a tiny "
            "model: look for a loop that never ends or a call that waits."
        ),
        hint=Hint(
            where="Look at every loop: does each one end?",
            what=(
                "Your code ran longer than the time limit: a loop that never ends, or far more "
                "work than the exercise needs."
            ),
            fix=(
                "Loop over what you are given (`for x, y in batches:`), once, instead of "
                "`while` loops that wait for a condition."
            ),
        ),
    ),
    Declared(
        code="memory-limit",
        name="Memory limit reached",
        words=(
            "Your code used more memory than it may. What this exercise asks needs almost none "
            "on a tiny model: look for a tensor or list that grows without bound."
        ),
        hint=Hint(
            where="Look at what your code keeps from one iteration to the next.",
            what=(
                "Your code used more memory than the limit: something grows on every iteration, "
                "such as a list of tensors that keep their graphs."
            ),
            fix="""Keep numbers, not tensors with their graphs:

```python
losses.append(loss.item())
```""",
        ),
    ),
    Declared(
        code="output-limit",
        name="Output limit reached",
        words=(
            "Your code printed more than the output limit allows. Print less, or nothing: the "
            "grader does not read printed output."
        ),
        hint=Hint(
            where="Look at your `print` calls.",
            what="Your code printed more than the limit allows, usually a print inside a loop.",
            fix="Remove the prints inside loops, or print only once at the end.",
        ),
    ),
    Declared(
        code="non-finite-value",
        name="Training blew up",
        words=(
            "Your code produced a value that is not a finite number: NaN, an infinity, or one "
            "far larger than these small problems ever give. Look for a division by zero, a log "
            "of zero or of a negative number, or a value that is added to itself instead of "
            "replaced."
        ),
        by_exercise={
            "amp-clip-step": (
                "Your code produced a value that is not a finite number: NaN, an infinity, or "
                "one far larger than these small problems ever give. With a gradient scaler, "
                "look for `optimizer.step()` called by your code: in a step whose scaled "
                "gradients overflowed, `scaler.step(optimizer)` skips the update, and "
                "`optimizer.step()` writes the infinite gradients into the weights."
            ),
        },
        hint=Hint(
            where=(
                "Look at what makes the update large: the size of the loss and of the gradients."
            ),
            what=(
                "The weights or the loss became infinite or NaN: updates that grow each step, "
                "such as gradients that keep adding up or a wrong scale."
            ),
            fix="""Clear the gradients every step and use the loss and optimizer you are given:

```python
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```""",
        ),
    ),
)


def declared_diagnoses() -> list[Declared]:
    """Every diagnosis, in the order of the modules that declare them: this module imports all
    of them, and the registry (graders.diagnoses, below them all) imports none. A kind's are the
    `diagnoses` of its `ExerciseKind`, for every kind in `graders.kinds.KINDS`."""
    return [
        *diagnosis.DECLARED,
        *DECLARED,
        *starter.DECLARED,
        *fitting.DECLARED,
        *judging.DECLARED,
        *(record for kind in KINDS.values() for record in kind.diagnoses),
    ]


def install_diagnoses() -> None:
    """Register every declared diagnosis, once per process (a later call does nothing). The
    loader calls it before it reads an exercise (whose toml may name codes) and the grader
    before it grades; a process that shows stored grades without either calls it at start."""
    diagnoses.install(declared_diagnoses)
