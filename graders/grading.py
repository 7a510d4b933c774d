"""grade(exercise, source): run the learner's code in the sandbox, judge it outside.

The sandbox returns a trace: untrusted numbers. Every verdict is made here, by comparing those
numbers with trajectories that this process computes itself from the same fixed-seed cases:
the reference solution's and those of the known buggy loops. Nothing the sandbox says about
itself (a pass, a score, a comparison) is ever read.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from graders import harness
from graders.diagnosis import diagnose
from graders.exercises import CaseSpec, Exercise, get_exercise
from graders.feedback import EXPLANATIONS
from graders.judging import check
from graders.kinds import JUDGES
from graders.report import Check, Diagnosis, GradeReport, PlotSeries
from graders.trace import (
    AnyTrace,
    CaseTrace,
    InvalidTrace,
    LoadError,
    MissingFunction,
    SyntaxErrorTrace,
    parse_trace,
)
from sandbox import Limits, RunResult, run

log = logging.getLogger(__name__)

GRADING_LIMITS = Limits(wall_timeout_seconds=15.0, cpu_seconds=10.0)
HARNESS_SOURCE = Path(harness.__file__).read_text()
MAX_OUTPUT_CHARS = 8000


@dataclass(frozen=True)
class Failure:
    """A learner-caused failure: the run could not be judged step by step."""

    diagnosis: Diagnosis
    message: str


def grade(exercise_id: str, source: str, limits: Limits | None = None) -> GradeReport:
    """Grade one submission of an exercise; learner mistakes are reports, never exceptions.

    Raises graders.exercises.UnknownExercise, and sandbox.SandboxUnavailable when this host
    cannot run untrusted code safely (a server fault, not the learner's).
    """
    exercise = get_exercise(exercise_id)
    limits = limits or GRADING_LIMITS
    groups = [
        cases
        for hidden in (False, True)
        if (cases := [c for c in exercise.cases if c.hidden == hidden])
    ]
    # Visible and hidden cases run apart so that nothing printed in a hidden case can be shown.
    with ThreadPoolExecutor(len(groups)) as pool:
        results = list(pool.map(lambda cases: _run_group(exercise, source, cases, limits), groups))
    output = "".join(
        (result.stdout + result.stderr).decode(errors="replace")
        for cases, result in zip(groups, results, strict=True)
        if not cases[0].hidden
    )[:MAX_OUTPUT_CHARS]
    traces: dict[str, CaseTrace] = {}
    for cases, result in zip(groups, results, strict=True):
        where = " in a hidden case" if cases[0].hidden else ""
        failure = _cap_failure(result, limits, where)
        if failure is None:
            try:
                trace = parse_trace(result.payload, exercise.kind, cases)
            except InvalidTrace as exc:
                log.info("exercise=%s invalid trace: %s", exercise.id, exc)
                failure = Failure("runtime-error", _early_exit_message(result, where))
            else:
                failure = trace_failure(exercise, trace, cases, traces)
        if failure is not None:
            return failure_report(exercise, failure, output)
    return judge(exercise, traces, output)


def _run_group(exercise: Exercise, source: str, cases: list[CaseSpec], limits: Limits) -> RunResult:
    request = {
        "kind": exercise.kind,
        "entry_point": exercise.entry_point,
        "cases": [c.harness_spec() for c in cases],
    }
    inputs = {
        harness.SUBMISSION_FILENAME: source.encode(),
        harness.CASES_FILENAME: json.dumps(request).encode(),
    }
    result = run(HARNESS_SOURCE, inputs, limits)
    log.info(
        "sandbox run: exercise=%s cases=%s exit=%s signal=%s limit=%s wall=%.2fs",
        exercise.id,
        ",".join(c.id for c in cases),
        result.exit_code,
        result.signal,
        result.limit_hit,
        result.wall_seconds,
    )
    return result


def _cap_failure(result: RunResult, limits: Limits, where: str) -> Failure | None:
    if result.timed_out or result.cpu_time_exceeded:
        seconds = limits.wall_timeout_seconds if result.timed_out else limits.cpu_seconds
        kind = "wall-clock" if result.timed_out else "CPU"
        return Failure(
            "timeout",
            f"Your code hit the {kind} time limit of {seconds:g} s{where} and was stopped.",
        )
    if result.memory_exceeded:
        return Failure(
            "memory-limit",
            f"Your code used more than {limits.memory_bytes // 2**20} MiB of memory{where} "
            "and was stopped.",
        )
    if result.output_truncated:
        return Failure(
            "output-limit",
            f"Your code printed more than {limits.output_bytes // 1024} KiB{where} "
            "and was stopped.",
        )
    others = {
        "process_limit_exceeded": f"started more than {limits.max_processes} processes",
        "file_size_exceeded": f"wrote a file larger than {limits.file_size_bytes // 2**20} MiB",
        "open_files_exceeded": f"opened more than {limits.open_files} files at once",
        "payload_truncated": "wrote too much on the grader's result channel",
    }
    for flag, what in others.items():
        if getattr(result, flag):
            return Failure("runtime-error", f"Your code {what}{where} and was stopped.")
    return None


def _early_exit_message(result: RunResult, where: str) -> str:
    if result.signal is not None:
        how = f"was killed by signal {result.signal}"
    elif result.exit_code:
        how = f"exited with status {result.exit_code}"
    else:
        how = "ended the program early"
    return (
        f"Your code {how}{where} before every step was checked. Your function should "
        "return, not exit."
    )


def _at_line(line: int | None) -> str:
    return f" (line {line} of your code)" if line else ""


def trace_failure(
    exercise: Exercise, trace: AnyTrace, cases: list[CaseSpec], traces: dict[str, CaseTrace]
) -> Failure | None:
    """The learner-caused failure a parsed trace shows, if any; else add its cases to `traces`."""
    if isinstance(trace, SyntaxErrorTrace):
        code_line = f"\n\n```\n{trace.text}\n```" if trace.text else ""
        return Failure("syntax-error", f"Line {trace.line}: {trace.message}.{code_line}")
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
            f"Your code raised `{error.type}` while it was being loaded"
            f"{_at_line(error.line)}: {error.message}",
        )
    for case, spec in zip(trace.cases, cases, strict=True):
        if case.error is not None:
            return _case_error(case, spec)
        traces[spec.id] = case
    return None


def _case_error(case: CaseTrace, spec: CaseSpec) -> Failure:
    error = case.error
    assert error is not None
    step = len(case.records) + 1
    if spec.hidden:
        where = f"In a hidden case, at call {step}, your code raised `{error.type}`."
    else:
        where = (
            f"In case `{spec.id}`, at call {step}, your code raised `{error.type}`"
            f"{_at_line(error.line)}: {error.message}\n\n```\n{error.traceback}\n```"
        )
    return Failure("grad-none-error" if error.grad_none else "runtime-error", where)


def failure_report(exercise: Exercise, failure: Failure, output: str = "") -> GradeReport:
    """Score 0: the checks could not be made."""
    checks = [
        Check(
            id=check_id,
            passed=False,
            points=0,
            max_points=points,
            message=(
                failure.message
                if check_id == "runs"
                else "Not checked: the code did not run to the end."
            ),
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
        feedback=f"{failure.message}\n\n{EXPLANATIONS[failure.diagnosis]}",
        output=output,
    )


# --- trusted trajectories -------------------------------------------------------------------

_trusted_cache: dict[tuple[str, str], dict[str, dict[str, CaseTrace]]] = {}
_trusted_lock = threading.Lock()


def trusted_trajectories(exercise: Exercise) -> dict[str, dict[str, CaseTrace]]:
    """Reference and known-bug trajectories for every case, keyed 'reference' or variant id.

    Computed in this process from the exercise's own files, once per exercise version.
    """
    key = (exercise.id, exercise.version)
    with _trusted_lock:
        if key not in _trusted_cache:
            sources = {"reference": exercise.solution_code}
            sources.update({variant.id: variant.source for variant in exercise.variants})
            _trusted_cache[key] = {
                name: trusted_run(exercise, source) for name, source in sources.items()
            }
        return _trusted_cache[key]


def trusted_run(exercise: Exercise, source: str) -> dict[str, CaseTrace]:
    """Run trusted code (a reference or a known bug) on every case, here, unsandboxed."""
    function = harness.load_function(source, exercise.entry_point, "trusted.py")
    return {
        spec.id: CaseTrace.model_validate(
            harness.run_case(exercise.kind, function, spec.harness_spec(), "trusted.py")
        )
        for spec in exercise.cases
    }


# --- judging --------------------------------------------------------------------------------


def judge(exercise: Exercise, traces: dict[str, CaseTrace], output: str = "") -> GradeReport:
    """Score, diagnose and explain the learner's traces of every case of the exercise."""
    kind = JUDGES[exercise.kind]
    trusted = trusted_trajectories(exercise)
    reference = trusted["reference"]
    findings = [
        kind.judge_case(spec, traces[spec.id], reference[spec.id]) for spec in exercise.cases
    ]
    checks = [
        check(check_id, points, kind.checks[check_id], findings)
        for check_id, points in exercise.checks.items()
    ]
    verdict = diagnose(exercise, traces, trusted, checks)
    first_failure = next((c.message for c in checks if not c.passed), None)
    parts = [first_failure, verdict.note, EXPLANATIONS[verdict.diagnosis]]
    plots: list[PlotSeries] = [
        plot
        for spec in exercise.cases
        if not spec.hidden
        for plot in kind.plots(spec, traces[spec.id], reference[spec.id])
    ]
    return GradeReport(
        exercise=exercise.id,
        exercise_version=exercise.version,
        score=sum(c.points for c in checks),
        max_score=exercise.max_score,
        diagnosis=verdict.diagnosis,
        other_diagnoses=list(verdict.also),
        checks=checks,
        feedback="\n\n".join(part for part in parts if part),
        plots=plots,
        output=output,
    )
