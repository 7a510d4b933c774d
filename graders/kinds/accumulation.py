"""Judging `accumulation_demo`: the gradient after one backward pass and after a second one.

The learner proves what the lesson says: run backward twice without clearing and `.grad` holds
the sum of both. The function returns both gradients as copies and takes no optimizer step.
"""

from __future__ import annotations

import torch

from graders.exercises import CaseSpec
from graders.judging import (
    CaseFindings,
    KindJudge,
    as_tensor,
    batch_of,
    case_data,
    close,
    close_values,
    difference,
    loss_and_gradients,
)
from graders.report import PlotSeries
from graders.trace import CaseTrace

CHECKS = {
    "runs": "Every case ran to the end.",
    "returns-pair": "Returns a tuple of two tensors.",
    "first-is-fresh": "The first gradient is exactly one backward pass's.",
    "second-is-double": "The second gradient is twice the first: the two passes accumulated.",
    "copies": "Both are copies: clearing `.grad` afterwards does not change them.",
    "weights-unchanged": "The weights are unchanged: no optimizer step.",
}


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    data = case_data(spec)
    record = learner.records[0]
    at = f"In {findings.where()}"
    _, fresh, _ = loss_and_gradients(data.weight, data.bias, *batch_of(data.inputs[0]))
    first, second = record["first"], record["second"]

    if record["result_type"] != "tuple" or first is None or second is None:
        findings.fail(
            "returns-pair",
            f"{at}: your function returned a `{record['result_type']}`; return "
            "`(first, second)`, two tensors.",
        )
    if not close_values(first, fresh):
        findings.fail("first-is-fresh", f"{at}: {_describe_first(first, fresh, spec)}")
    if not close_values(second, 2 * fresh):
        findings.fail("second-is-double", f"{at}: {_describe_second(second, fresh, spec)}")
    changed = [
        name
        for name in ("first", "second")
        if record[name] is not None and record[f"{name}_after_clearing"] != record[name]
    ]
    if changed:
        findings.fail(
            "copies",
            f"{at}: after your function returned, zeroing `.grad` in place changed the "
            f"{' and '.join(changed)} tensor you returned: it is the live `.grad`, not a copy. "
            "Return `model.weight.grad.clone()`.",
        )
    weight = as_tensor(record["weight"])
    if not (close(weight, data.weight) and close(as_tensor(record["bias"]), data.bias)):
        detail = "" if spec.hidden else ": " + difference("weight", weight, data.weight)
        findings.fail(
            "weights-unchanged",
            f"{at}: your function changed the weights{detail}. This exercise takes no "
            "optimizer step.",
        )
    return findings


def _describe_first(first: object, fresh: torch.Tensor, spec: CaseSpec) -> str:
    if first is None:
        return "the first gradient you returned is `None`."
    if close(as_tensor(first), 2 * fresh):
        return (
            "the first gradient is already twice one pass's: it was taken after the second "
            "backward(), or it is the live `.grad`, which the second pass added to. Clone it "
            "right after the first backward()."
        )
    detail = "" if spec.hidden else ": " + difference("first", as_tensor(first), fresh)
    return f"the first gradient is not one backward pass's gradient{detail}."


def _describe_second(second: object, fresh: torch.Tensor, spec: CaseSpec) -> str:
    if second is None:
        return "the second gradient you returned is `None`."
    if close(as_tensor(second), fresh):
        return (
            "the second gradient equals one pass's: the gradients were cleared between the "
            "two passes, so nothing accumulated. Do not call zero_grad() in between."
        )
    detail = "" if spec.hidden else ": " + difference("second", as_tensor(second), 2 * fresh)
    return f"the second gradient is not twice the first{detail}."


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("result_type", ("tuple",)),
    judge_case=judge_case,
    plots=plots,
)
