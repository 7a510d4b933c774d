"""Judging `total_grad_magnitude`: the sum of |grad| over all parameters, None counting as zero.

Cases leave `.grad` present, released by zero_grad() (None), filled with zeros, or mixed. The
function must read the gradients without changing them.
"""

from __future__ import annotations

import functools
from typing import Any

from graders import harness
from graders.exercises import CaseSpec
from graders.feedback import learner_text
from graders.judging import CaseFindings, KindJudge, same_value, within_tolerance
from graders.report import PlotSeries
from graders.trace import CaseTrace

CHECKS = {
    "runs": "Every case ran to the end.",
    "magnitude-correct": "Returns the sum of |grad| over all parameters in every case.",
    "grads-unchanged": "Leaves every gradient as it found it.",
    "returns-float": "Returns a Python float.",
}

STATES = {
    "present": "gradients present",
    "none": "`.grad` released by zero_grad() (None)",
    "zeros": "`.grad` filled with zeros by zero_grad(set_to_none=False)",
    "mixed": "the weight's gradient present and the bias's None",
}


@functools.cache
def expected_magnitudes(spec: CaseSpec) -> tuple[float, float, dict[str, Any]]:
    """The right answer, the answer without abs(), and the gradients as the case leaves them."""
    case = harness.build_case(spec.harness_spec())
    model = harness.prepare_gradients(case, spec.grad_state)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    state = {
        "weight_grad": None if model.weight.grad is None else model.weight.grad.tolist(),
        "bias_grad": None if model.bias.grad is None else model.bias.grad.tolist(),
    }
    return (
        float(sum(g.abs().sum().item() for g in grads)),
        float(sum(g.sum().item() for g in grads)),
        state,
    )


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    record = learner.records[0]
    expected, without_abs, grads_before = expected_magnitudes(spec)
    at = f"In {findings.where()} ({STATES[spec.grad_state]})"
    value = record["value"]
    if value is None or not within_tolerance(value, expected):
        if value is not None and within_tolerance(value, without_abs):
            detail = f" You returned {value:.6g}, the sum without abs(): gradients can be negative."
        else:
            shown = "nothing numeric" if value is None else f"{value:.6g}"
            detail = f" You returned {shown}; the sum of |grad| is {expected:.6g}."
        if spec.grad_state in ("none", "mixed"):
            detail += " A released gradient (None) counts as zero."
        findings.fail("magnitude-correct", f"{at}: the magnitude is wrong.{detail}")
    changed = [
        name
        for name in ("weight_grad", "bias_grad")
        if not same_value(name, record[name], grads_before[name])
        or (record[name] is None) != (grads_before[name] is None)
    ]
    if changed:
        names = " and ".join("`" + name.replace("_", ".") + "`" for name in changed)
        findings.fail(
            "grads-unchanged",
            f"{at}: your function changed {names}. Read the gradients; do not clear or "
            "modify them.",
        )
    if record["value_type"] != "float":
        findings.fail(
            "returns-float",
            f"{at}: your function returned a {learner_text(record['value_type'])}, not a "
            "`float`. "
            "Use `.item()` or `float(...)`.",
        )
    return findings


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("value_type", ("float",)),
    judge_case=judge_case,
    plots=plots,
)
