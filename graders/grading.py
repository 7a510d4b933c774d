"""grade(exercise, source): run the learner's code in the sandbox, judge it outside.

The sandbox returns a trace: untrusted numbers. Every verdict is made here, by comparing those
numbers with trajectories that this process computes itself from the same fixed-seed cases:
the reference solution's and those of the known buggy loops. Nothing the sandbox says about
itself (a pass, a score, a comparison) is ever read.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graders.exercises import CaseSpec, Exercise, get_exercise
from graders.feedback import EXPLANATIONS
from graders.report import Check, Diagnosis, GradeReport, PlotSeries
from graders.trace import (
    CaseTrace,
    InvalidTrace,
    LoadError,
    MissingFunction,
    Ran,
    StepRecord,
    SyntaxErrorTrace,
    parse_trace,
)
from sandbox import Limits, RunResult, harness, run

log = logging.getLogger(__name__)

GRADING_LIMITS = Limits(wall_timeout_seconds=15.0, cpu_seconds=10.0)
HARNESS_SOURCE = Path(harness.__file__).read_text()
# float32 arithmetic done in a different order (a hand-written MSE, say) differs by ~1e-7.
RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE = 1e-4, 1e-5
MAX_OUTPUT_CHARS = 8000

# What a passing check says.
CHECK_PASSED = {
    "runs": "Every case ran to the end.",
    "weights-change": "Every call changed the weights.",
    "weights-match": "After every call the weights equal the reference loop's.",
    "fresh-gradients": "After every call `.grad` holds this batch's gradient alone, not a sum.",
    "update-uses-current-batch": "Every update is one step on this batch's gradient.",
    "loss-returned": "Every call returned this batch's loss before the update, as a float.",
}


@dataclass(frozen=True)
class GroupRun:
    """One sandbox run over a group of cases that are all visible or all hidden."""

    cases: list[CaseSpec]
    hidden: bool
    result: RunResult


@dataclass(frozen=True)
class Failure:
    """A learner-caused failure: the run could not be judged step by step."""

    diagnosis: Diagnosis
    message: str


@dataclass
class CaseFindings:
    """For one case, the first failure of each check (absent when the check passed)."""

    spec: CaseSpec
    failures: dict[str, str] = field(default_factory=dict)

    def fail(self, check: str, message: str) -> None:
        self.failures.setdefault(check, message)


def grade(exercise_id: str, source: str, limits: Limits | None = None) -> GradeReport:
    """Grade one submission of an exercise; learner mistakes are reports, never exceptions.

    Raises graders.exercises.UnknownExercise, and sandbox.SandboxUnavailable when this host
    cannot run untrusted code safely (a server fault, not the learner's).
    """
    exercise = get_exercise(exercise_id)
    limits = limits or GRADING_LIMITS
    groups = [
        (cases, hidden)
        for hidden in (False, True)
        if (cases := [c for c in exercise.cases if c.hidden == hidden])
    ]
    # Visible and hidden cases run apart so that nothing printed in a hidden case can be shown.
    with ThreadPoolExecutor(len(groups)) as pool:
        runs = list(
            pool.map(
                lambda group: GroupRun(
                    group[0], group[1], _run_group(exercise, source, group[0], limits)
                ),
                groups,
            )
        )
    output = _visible_output(runs)
    failure, traces = _find_failure(exercise, runs, limits)
    if failure is not None:
        return _failure_report(exercise, failure, output)
    return _judge(exercise, traces, output)


def _run_group(exercise: Exercise, source: str, cases: list[CaseSpec], limits: Limits) -> RunResult:
    request = {"entry_point": exercise.entry_point, "cases": [c.harness_spec() for c in cases]}
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


def _visible_output(runs: Sequence[GroupRun]) -> str:
    """What the learner printed in the visible cases; hidden cases' output is never shown."""
    text = "".join(
        (r.result.stdout + r.result.stderr).decode(errors="replace") for r in runs if not r.hidden
    )
    return text[:MAX_OUTPUT_CHARS]


def _find_failure(
    exercise: Exercise, runs: Sequence[GroupRun], limits: Limits
) -> tuple[Failure | None, dict[str, CaseTrace]]:
    """The first learner-caused failure, visible cases first; else every case's trace."""
    traces: dict[str, CaseTrace] = {}
    for group in runs:
        where = " in a hidden case" if group.hidden else ""
        result = group.result
        cap = _cap_failure(result, limits, where)
        if cap is not None:
            return cap, {}
        try:
            trace = parse_trace(result.payload, group.cases)
        except InvalidTrace as exc:
            log.info("invalid trace: %s", exc)
            return Failure("runtime-error", _early_exit_message(result, where)), {}
        if isinstance(trace, SyntaxErrorTrace):
            code_line = f"\n\n```\n{trace.text}\n```" if trace.text else ""
            return Failure("syntax-error", f"Line {trace.line}: {trace.message}.{code_line}"), {}
        if isinstance(trace, MissingFunction):
            return Failure(
                "missing-function",
                f"No function named `{exercise.entry_point}` was found in your code. "
                f"Define it as `{exercise.signature}`.",
            ), {}
        if isinstance(trace, LoadError):
            error = trace.error
            return Failure(
                "runtime-error",
                f"Your code raised `{error.type}` while it was being loaded"
                f"{_at_line(error.line)}: {error.message}",
            ), {}
        assert isinstance(trace, Ran)
        for case, spec in zip(trace.cases, group.cases, strict=True):
            if case.error is not None:
                return _case_error(case, spec), {}
            traces[spec.id] = case
    return None, traces


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
        f"Your code {how}{where} before every step was checked. A training step should "
        "return, not exit."
    )


def _at_line(line: int | None) -> str:
    return f" (line {line} of your code)" if line else ""


def _case_error(case: CaseTrace, spec: CaseSpec) -> Failure:
    error = case.error
    assert error is not None
    step = len(case.steps) + 1
    if spec.hidden:
        where = f"In a hidden case, at step {step}, your code raised `{error.type}`."
    else:
        where = (
            f"In case `{spec.id}`, at step {step}, your code raised `{error.type}`"
            f"{_at_line(error.line)}: {error.message}\n\n```\n{error.traceback}\n```"
        )
    if error.grad_none:
        return Failure("grad-none-error", where)
    return Failure("runtime-error", where)


def _failure_report(exercise: Exercise, failure: Failure, output: str) -> GradeReport:
    message = failure.message
    checks = [
        Check(
            id=check_id,
            passed=False,
            points=0,
            max_points=points,
            message=message
            if check_id == "runs"
            else "Not checked: the code did not run to the end.",
        )
        for check_id, points in exercise.checks.items()
    ]
    feedback = f"{message}\n\n{EXPLANATIONS[failure.diagnosis]}"
    return GradeReport(
        exercise=exercise.id,
        score=0,
        max_score=exercise.max_score,
        diagnosis=failure.diagnosis,
        checks=checks,
        feedback=feedback,
        output=output,
    )


# --- trusted computations -------------------------------------------------------------------


def _tensor(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE)


def _cleared(values: Any) -> bool:
    """A gradient that zero_grad() released (None) or filled with zeros."""
    return values is None or not bool(_tensor(values).any())


def _largest_difference(mine: torch.Tensor, theirs: torch.Tensor) -> str:
    difference = (mine - theirs).abs()
    flat = int(difference.argmax())
    index = list(torch.unravel_index(torch.tensor(flat), difference.shape))
    where = "".join(f"[{int(i)}]" for i in index)
    return (
        f"{where}: yours {mine.flatten()[flat].item():.6g}, "
        f"expected {theirs.flatten()[flat].item():.6g}"
    )


@dataclass(frozen=True)
class CaseData:
    """The trusted starting point of a case: initial parameters and the batches."""

    weight: torch.Tensor
    bias: torch.Tensor
    batches: list[tuple[torch.Tensor, torch.Tensor]]


@functools.cache
def _case_data(spec: CaseSpec) -> CaseData:
    case = harness.build_case(spec.harness_spec())
    return CaseData(
        weight=case.model.weight.detach().clone(),
        bias=case.model.bias.detach().clone(),
        batches=case.batches,
    )


def _loss_and_gradients(
    weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """This batch's MSE loss and gradients at the given parameters, computed here."""
    weight = weight.clone().requires_grad_(True)
    bias = bias.clone().requires_grad_(True)
    loss = torch.nn.functional.mse_loss(x @ weight.T + bias, y)
    weight_grad, bias_grad = torch.autograd.grad(loss, [weight, bias])
    return loss.item(), weight_grad, bias_grad


def _load_trusted(source: str, exercise: Exercise) -> Any:
    return harness.load_function(source, exercise.entry_point, "trusted.py")


_trusted_cache: dict[tuple[str, str], dict[str, dict[str, CaseTrace]]] = {}
_trusted_lock = threading.Lock()


def _trusted_trajectories(exercise: Exercise) -> dict[str, dict[str, CaseTrace]]:
    """Reference and known-bug trajectories for every case, keyed 'reference' or variant id.

    Computed once per exercise version: they depend on nothing but the exercise.
    """
    key = (exercise.id, exercise.version)
    with _trusted_lock:
        if key not in _trusted_cache:
            _trusted_cache[key] = _compute_trusted_trajectories(exercise)
        return _trusted_cache[key]


def _compute_trusted_trajectories(exercise: Exercise) -> dict[str, dict[str, CaseTrace]]:
    functions = {"reference": _load_trusted(exercise.solution_code, exercise)}
    for variant in exercise.variants:
        functions[variant.id] = _load_trusted(variant.source, exercise)
    return {
        name: {
            spec.id: CaseTrace.model_validate(harness.run_case(function, spec.harness_spec()))
            for spec in exercise.cases
        }
        for name, function in functions.items()
    }


# --- judging --------------------------------------------------------------------------------


def _judge(exercise: Exercise, traces: dict[str, CaseTrace], output: str) -> GradeReport:
    trusted = _trusted_trajectories(exercise)
    reference = trusted["reference"]
    findings = [
        _judge_case(spec, traces[spec.id].steps, reference[spec.id].steps)
        for spec in exercise.cases
    ]
    checks = [_check(check_id, points, findings) for check_id, points in exercise.checks.items()]
    diagnosis = _diagnose(exercise, traces, trusted, checks)
    explanation = EXPLANATIONS[diagnosis]
    first_failure = next((c.message for c in checks if not c.passed), None)
    feedback = explanation if first_failure is None else f"{first_failure}\n\n{explanation}"
    return GradeReport(
        exercise=exercise.id,
        score=sum(c.points for c in checks),
        max_score=exercise.max_score,
        diagnosis=diagnosis,
        checks=checks,
        feedback=feedback,
        plots=_plots(exercise, traces, reference),
        output=output,
    )


def _judge_case(
    spec: CaseSpec, steps: list[StepRecord], reference: list[StepRecord]
) -> CaseFindings:
    findings = CaseFindings(spec)
    data = _case_data(spec)
    where = "a hidden case" if spec.hidden else f"case `{spec.id}`"
    weight, bias = data.weight, data.bias
    matched_reference = True
    for index, (step, expected) in enumerate(zip(steps, reference, strict=True)):
        at = f"In {where}, step {index + 1}"
        x, y = data.batches[index]
        loss, weight_grad, bias_grad = _loss_and_gradients(weight, bias, x, y)
        new_weight, new_bias = _tensor(step.weight), _tensor(step.bias)

        if torch.equal(new_weight, weight) and torch.equal(new_bias, bias):
            findings.fail("weights-change", f"{at}: the weights did not change at all.")

        reference_weight, reference_bias = _tensor(expected.weight), _tensor(expected.bias)
        if not (_close(new_weight, reference_weight) and _close(new_bias, reference_bias)):
            detail = (
                ""
                if spec.hidden
                else (
                    " Largest difference at weight"
                    + _largest_difference(new_weight, reference_weight)
                    + "."
                )
            )
            findings.fail(
                "weights-match",
                f"{at}: your weights differ from the reference loop's.{detail}",
            )
            update_ok = _judge_update(
                findings,
                spec,
                index,
                at,
                weight,
                bias,
                new_weight,
                new_bias,
                weight_grad,
                bias_grad,
                reference,
                matched_reference,
            )
            matched_reference = False
        else:
            update_ok = True

        holds_this_batch = _fresh(step.weight_grad, weight_grad) and _fresh(
            step.bias_grad, bias_grad
        )
        # None or zeros after the call is fine when the step itself was right: the loop cleared
        # after stepping, as well as before.
        cleared_after_good_step = (
            _cleared(step.weight_grad) and _cleared(step.bias_grad) and update_ok
        )
        if not (holds_this_batch or cleared_after_good_step):
            detail = "" if spec.hidden else " " + _describe_gradient(step.weight_grad, weight_grad)
            findings.fail(
                "fresh-gradients",
                f"{at}: after your step, `.grad` does not hold this batch's gradient.{detail}",
            )

        if step.loss_type != "float":
            findings.fail(
                "loss-returned",
                f"{at}: your function returned a `{step.loss_type}`, not a `float`. "
                "Return `loss.item()`.",
            )
        elif step.loss is None or abs(
            step.loss - loss
        ) > ABSOLUTE_TOLERANCE + RELATIVE_TOLERANCE * abs(loss):
            detail = (
                "" if spec.hidden else f" You returned {step.loss:.6g}; the loss was {loss:.6g}."
            )
            findings.fail(
                "loss-returned",
                f"{at}: the returned value is not this batch's loss before the update.{detail}",
            )
        weight, bias = new_weight, new_bias
    return findings


def _judge_update(
    findings: CaseFindings,
    spec: CaseSpec,
    index: int,
    at: str,
    weight: torch.Tensor,
    bias: torch.Tensor,
    new_weight: torch.Tensor,
    new_bias: torch.Tensor,
    weight_grad: torch.Tensor,
    bias_grad: torch.Tensor,
    reference: list[StepRecord],
    matched_reference: bool,
) -> bool:
    """Judge one step's update on its own, from the learner's weights before it.

    Plain SGD needs nothing but those weights. With momentum the update also depends on the
    optimizer's buffer, which is known (the reference's) only while the learner's weights
    matched the reference's; after they part, weights-match has failed and this step is not
    judged here. Returns whether the update was right (or not judged).
    """
    if spec.momentum:
        if not matched_reference:
            return True
        previous = reference[index - 1].momentum if index else None
        buffer = (
            weight_grad if previous is None else spec.momentum * _tensor(previous) + weight_grad
        )
        # The bias's buffer is not recorded; its weight's is enough to tell a stale update.
        expected_weight, expected_bias = weight - spec.lr * buffer, None
    else:
        expected_weight, expected_bias = weight - spec.lr * weight_grad, bias - spec.lr * bias_grad
    if _close(new_weight, expected_weight) and (
        expected_bias is None or _close(new_bias, expected_bias)
    ):
        return True
    detail = (
        ""
        if spec.hidden
        else (
            " One SGD step on this batch's gradient would give weight"
            + _largest_difference(new_weight, expected_weight)
            + "."
        )
    )
    findings.fail(
        "update-uses-current-batch",
        f"{at}: the update is not one step on this batch's gradient.{detail}",
    )
    return False


def _fresh(recorded: Any, fresh: torch.Tensor) -> bool:
    return recorded is not None and _close(_tensor(recorded), fresh)


def _describe_gradient(recorded: Any, fresh: torch.Tensor) -> str:
    if recorded is None:
        return "It is `None`: no gradient was computed for this batch."
    return "Largest difference at weight.grad" + _largest_difference(_tensor(recorded), fresh) + "."


def _check(check_id: str, points: float, findings: list[CaseFindings]) -> Check:
    failures = [f.failures[check_id] for f in findings if check_id in f.failures]
    hidden_failures = [f for f in findings if check_id in f.failures and f.spec.hidden]
    if failures:
        message = failures[0]
        if len(failures) > 1:
            message += f" ({len(failures)} cases fail this check.)"
    else:
        message = CHECK_PASSED[check_id]
    return Check(
        id=check_id,
        passed=not failures,
        points=0 if failures else points,
        max_points=points,
        message=message,
        # A check is hidden when only hidden cases make it fail.
        hidden=bool(failures) and len(hidden_failures) == len(failures),
    )


def _same_steps(mine: list[StepRecord], theirs: list[StepRecord]) -> bool:
    """Do two trajectories agree on weights, gradients and the returned loss at every step?"""
    for a, b in zip(mine, theirs, strict=True):
        if not (
            _close(_tensor(a.weight), _tensor(b.weight))
            and _close(_tensor(a.bias), _tensor(b.bias))
        ):
            return False
        for ga, gb in ((a.weight_grad, b.weight_grad), (a.bias_grad, b.bias_grad)):
            if _cleared(ga) != _cleared(gb) or (
                not _cleared(ga) and not _close(_tensor(ga), _tensor(gb))
            ):
                return False
        if a.loss_type != b.loss_type or (a.loss is None) != (b.loss is None):
            return False
        if (
            a.loss is not None
            and b.loss is not None
            and not _close(_tensor(a.loss), _tensor(b.loss))
        ):
            return False
    return True


def _observed_calls(traces: dict[str, CaseTrace]) -> list[list[str]]:
    return [list(step.calls) for trace in traces.values() for step in trace.steps]


def _diagnose(
    exercise: Exercise,
    traces: dict[str, CaseTrace],
    trusted: dict[str, dict[str, CaseTrace]],
    checks: list[Check],
) -> Diagnosis:
    """Name the mistake: first by the numbers, then, among look-alikes, by the call order.

    The call order comes from the sandbox and could be forged, so it only ever chooses between
    diagnoses; the score is already fixed by the checks.
    """
    if all(c.passed for c in checks):
        return "correct"
    observed = _observed_calls(traces)
    matching = [
        variant
        for variant in exercise.variants
        if all(trusted[variant.id][spec.id].error is None for spec in exercise.cases)
        and all(
            _same_steps(traces[spec.id].steps, trusted[variant.id][spec.id].steps)
            for spec in exercise.cases
        )
    ]
    if matching:
        by_order = [v for v in matching if v.calls in observed]
        return (by_order or matching)[0].diagnosis
    return _diagnose_by_order(observed, checks)


def _diagnose_by_order(observed: list[list[str]], checks: list[Check]) -> Diagnosis:
    """No known loop matches the numbers: read the mistake from the order of calls."""
    passed = {c.id for c in checks if c.passed}
    if {"weights-match", "fresh-gradients", "update-uses-current-batch"} <= passed:
        return "wrong-return-type" if "loss-returned" not in passed else "incorrect"
    for calls in observed:
        if "backward" not in calls:
            return "missing-backward"
        if "step" not in calls:
            return "missing-step"
        if calls.index("step") < calls.index("backward"):
            return "step-before-backward"
        between = calls[calls.index("backward") : calls.index("step")]
        if "zero_grad" in between:
            return "zero-grad-before-step"
        if "zero_grad" not in calls[: calls.index("backward")] and "fresh-gradients" not in passed:
            return "missing-zero-grad"
    return "incorrect"


def _plots(
    exercise: Exercise, traces: dict[str, CaseTrace], reference: dict[str, CaseTrace]
) -> list[PlotSeries]:
    """Per-step loss and first weight of each visible case, the learner's against the reference."""
    plots = []
    for spec in exercise.cases:
        if spec.hidden:
            continue
        mine, theirs = traces[spec.id].steps, reference[spec.id].steps
        plots.append(
            PlotSeries(
                case=spec.id,
                label="loss",
                learner=[s.loss for s in mine],
                reference=[s.loss or 0.0 for s in theirs],
            )
        )
        plots.append(
            PlotSeries(
                case=spec.id,
                label="weight[0][0]",
                learner=[s.weight[0][0] for s in mine],
                reference=[s.weight[0][0] for s in theirs],
            )
        )
    return plots
