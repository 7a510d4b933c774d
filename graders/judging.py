"""What every exercise kind judges with: trusted cases, tolerant comparison, findings, checks.

Everything here runs outside the sandbox, on numbers the grader computes itself or on the
learner's untrusted numbers, which it only compares.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy
import torch

from graders import harness
from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec
from graders.report import MAX_PLOT_POINTS, Check, PlotSeries
from graders.sentences import Said, Sentence, words_of
from graders.trace import CaseTrace, parameter_shapes

# float32 arithmetic done in a different order (a hand-written MSE, say) differs by ~1e-7.
RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE = 1e-4, 1e-5


def as_tensor(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def within_tolerance(mine: float, expected: float) -> bool:
    """Is a number within tolerance of the expected one? Written so that NaN is never within."""
    return abs(mine - expected) <= ABSOLUTE_TOLERANCE + RELATIVE_TOLERANCE * abs(expected)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Are two tensors within tolerance, element by element? Never when one is not finite."""
    return (
        a.shape == b.shape
        and bool(torch.isfinite(a).all())
        and bool(torch.isfinite(b).all())
        and torch.allclose(a, b, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE)
    )


def close_numbers(a: Any, b: Any) -> bool:
    """`close` for two recorded values (numbers, nested lists of them) without making tensors:
    the same float32 operations as `torch.allclose` after `as_tensor`, in numpy, in a fraction
    of the time (judging compares thousands of small values a grading). Anything but numbers
    of one rectangular shape is not close."""
    # Past float32's range a value or a difference is inf: not finite, or not within.
    with numpy.errstate(over="ignore"):
        x, y = _float32_numbers(a), _float32_numbers(b)
        if x is None or y is None or x.shape != y.shape:
            return False
        if not (numpy.isfinite(x).all() and numpy.isfinite(y).all()):
            return False
        allowed = ABSOLUTE_TOLERANCE + numpy.abs(RELATIVE_TOLERANCE * y)
        return bool((numpy.abs(x - y) <= allowed).all())


def _float32_numbers(values: Any) -> numpy.ndarray | None:
    """The values as float32, as `as_tensor` makes them; None for what it refuses (text, None,
    ragged lists). Call it under `numpy.errstate(over="ignore")`: past float32's range is inf."""
    try:
        array = numpy.asarray(values)
    except (TypeError, ValueError):
        return None
    if array.dtype.kind not in "biuf":
        return None
    return array.astype(numpy.float32)


def close_values(recorded: Any, expected: torch.Tensor) -> bool:
    """Does a recorded (untrusted) tensor, possibly None, equal an expected one?"""
    return recorded is not None and close(as_tensor(recorded), expected)


def cleared(values: Any) -> bool:
    """A gradient that zero_grad() released (None) or filled with zeros (numbers only)."""
    if values is None:
        return True
    with numpy.errstate(over="ignore"):
        numbers = _float32_numbers(values)
    return numbers is not None and not numbers.any()


def difference(name: str, mine: torch.Tensor, expected: torch.Tensor) -> str:
    """Where two tensors differ most, in the learner's terms: `weight[0][2]` is a, expected b."""
    gap = (mine - expected).abs()
    flat = int(gap.argmax()) if gap.numel() else 0
    index = torch.unravel_index(torch.tensor(flat), gap.shape) if gap.dim() else ()
    where = name + "".join(f"[{int(i)}]" for i in index)
    yours, theirs = mine.flatten()[flat].item(), expected.flatten()[flat].item()
    gap_text = f"{abs(yours - theirs):.3g}"
    return f"`{where}` is {yours:.6g} where {theirs:.6g} was expected (off by {gap_text})"


def versus(name: str, mine: torch.Tensor, theirs: torch.Tensor, whose: str) -> str:
    """Where two tensors differ most, the learner's value first: "`weight[0][2]` is -0.229;
    the reference's step gives 0.096" (`whose` says where the second value comes from)."""
    gap = (mine - theirs).abs()
    flat = int(gap.argmax()) if gap.numel() else 0
    index = torch.unravel_index(torch.tensor(flat), gap.shape) if gap.dim() else ()
    where = name + "".join(f"[{int(i)}]" for i in index)
    yours, expected = mine.flatten()[flat].item(), theirs.flatten()[flat].item()
    return f"after the call, `{where}` is {yours:.6g}; {whose} {expected:.6g}"


# The sentences every kind says with (graders.sentences): a case, where two tensors differ most,
# and one part of a sentence after another.
IN_CASE = Sentence("judging/in-case", "case `{case}`")
DIFFERENCE = Sentence(
    "judging/difference",
    "`{where}` is {yours:.6g} where {theirs:.6g} was expected (off by {gap:.3g})",
)
THEN = Sentence("judging/then", "{first} {then}")
# Every kind's `runs` check, passed (its failure is said in the feedback: grading.RUN_FAILED).
RAN_TO_THE_END = Sentence("judging/passed-runs", "Every case ran to the end.")
# What a check says first: where (the third unit's kinds; the older ones declare their own).
AT_CASE = Sentence("judging/at-case", "In {case}")
AT_CALL = Sentence("judging/at-call", "In {case}, call {call}")
AFTER_THE_CALL = Sentence("judging/after-the-call", "{at}: after the call, {wrong}.")
# Measured when the function returned: true of code that never called `train()` and of code
# that called it and then `eval()`.
LEFT_IN_EVAL = Sentence(
    "judging/left-in-eval",
    "{at}: when your function returned, the model was in evaluation mode. Leave it in training "
    "mode: the last mode your code sets before it returns is `model.train()`.",
)
NOT_FLOAT = Sentence(
    "judging/not-float",
    "{at}: your function returned a {type}, not a Python `float`. `.item()` makes one of a "
    "one-element tensor.",
)


def differs(name: str, mine: torch.Tensor, expected: torch.Tensor) -> Said:
    """`difference`, said as a sentence: where two tensors differ most, the learner's first."""
    where, yours, theirs = _most_different(name, mine, expected)
    return DIFFERENCE(where=where, yours=yours, theirs=theirs, gap=abs(yours - theirs))


def said_versus(sentence: Sentence, name: str, mine: torch.Tensor, theirs: torch.Tensor) -> Said:
    """`versus`, said as `sentence` (its fields `where`, `yours`, `theirs`): the learner's value
    first, then where the other comes from, in the sentence's words."""
    where, yours, expected = _most_different(name, mine, theirs)
    return sentence(where=where, yours=yours, theirs=expected)


def _most_different(
    name: str, mine: torch.Tensor, theirs: torch.Tensor
) -> tuple[str, float, float]:
    gap = (mine - theirs).abs()
    flat = int(gap.argmax()) if gap.numel() else 0
    index = torch.unravel_index(torch.tensor(flat), gap.shape) if gap.dim() else ()
    where = name + "".join(f"[{int(i)}]" for i in index)
    return where, float(mine.flatten()[flat].item()), float(theirs.flatten()[flat].item())


def opened(spec: CaseSpec, learner: CaseTrace) -> tuple[CaseFindings, dict[str, Any], Said]:
    """How a kind that records one final state opens `judge_case`: the case's findings, empty;
    the learner's final record; where its findings are said ("In case `basic`")."""
    findings = CaseFindings(spec)
    final = learner.final
    assert final is not None  # parse_trace: a case that ran has its final record
    return findings, final, AT_CASE(case=findings.case())


def then(first: Said, *parts: Said | None) -> Said:
    """`first`, then each part that is said (None: not said), one after the other."""
    said = first
    for part in parts:
        if part is not None:
            said = THEN(first=said, then=part)
    return said


def constant_factor(mine: torch.Tensor, theirs: torch.Tensor) -> float | None:
    """The number k with `mine` = k * `theirs` within tolerance, if there is one (and it is not
    1 or 0): "your update is 2.0 times the reference's"."""
    if mine.shape != theirs.shape or not bool(theirs.any()):
        return None
    at = int(theirs.abs().argmax())
    factor = float(mine.flatten()[at] / theirs.flatten()[at])
    if factor == 0 or abs(factor - 1) < 1e-3 or not close(mine, factor * theirs):
        return None
    return factor


def times(count: int) -> str:
    """How often something happened, in words: never, once, twice, 3 times."""
    return {0: "never", 1: "once", 2: "twice"}.get(count, f"{count} times")


_TIMES = {
    0: Sentence("judging/never", "never"),
    1: Sentence("judging/once", "once"),
    2: Sentence("judging/twice", "twice"),
}
N_TIMES = Sentence("judging/times", "{count} times")


def said_times(count: int) -> Said:
    """`times`, said as a part of a check's sentence."""
    sentence = _TIMES.get(count)
    return sentence() if sentence is not None else N_TIMES(count=count)


@dataclass(frozen=True)
class CaseData:
    """The trusted starting point of a case: its model's parameters and their gradients by name
    (`weight`, or `0.weight`, `2.bias` for an mlp; the first is the first layer's weight), and
    the inputs."""

    parameters: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor | None]
    inputs: list[Any]

    @property
    def first(self) -> str:
        """The first layer's weight's name: the parameter a message speaks of."""
        return next(iter(self.parameters))

    @property
    def weight(self) -> torch.Tensor:
        return self.parameters[self.first]

    @property
    def bias(self) -> torch.Tensor:
        """The bias of a linear model (the kinds that read only linear ones)."""
        return self.parameters["bias"]


def _detached(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.detach().clone()


@functools.cache
def case_data(spec: CaseSpec) -> CaseData:
    case = harness.build_case(spec.harness_spec())
    named = list(case.model.named_parameters())
    return CaseData(
        parameters={name: parameter.detach().clone() for name, parameter in named},
        grads={name: _detached(parameter.grad) for name, parameter in named},
        inputs=case.inputs,
    )


def batch_of(given: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """One call's data as one batch: equal micro-batches' mean loss is the whole batch's loss."""
    if isinstance(given, list):
        return torch.cat([x for x, _ in given]), torch.cat([y for _, y in given])
    x, y = given
    return x, y


def loss_and_gradients(
    spec: CaseSpec, parameters: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> tuple[float, dict[str, torch.Tensor]]:
    """This batch's loss (the case's) and its gradients at the given parameters, computed here
    on the case's model."""
    harness_spec = spec.harness_spec()
    model = harness.build_model(harness_spec, torch.Generator())
    leaves = {name: value.clone().requires_grad_(True) for name, value in parameters.items()}
    output = torch.func.functional_call(model, leaves, (x,))
    loss = harness.build_loss(harness_spec)(output, y)
    gradients = torch.autograd.grad(loss, list(leaves.values()))
    return loss.item(), dict(zip(leaves, gradients, strict=True))


def flat_parameter_count(spec: CaseSpec) -> int:
    """How many numbers the case's model has (a `parameters` field's length)."""
    return sum(math.prod(shape) for shape in parameter_shapes(spec).values())


def unflattened(spec: CaseSpec, flat: Any) -> dict[str, torch.Tensor]:
    """A record's `parameters` (every parameter flattened, `harness.flat_parameters`) as the
    model's named tensors: `weight`, `bias`, or `0.weight`, ... of a declared mlp."""
    values = flat if isinstance(flat, torch.Tensor) else as_tensor(flat)
    tensors, at = {}, 0
    for name, shape in parameter_shapes(spec).items():
        size = math.prod(shape)
        tensors[name] = values[at : at + size].reshape(shape)
        at += size
    return tensors


def in_code(name: str) -> str:
    """A parameter's name (`named_parameters()`'s) as code reaches it from the model:
    `weight` is `model.weight`, `0.weight` is `model[0].weight`."""
    parts = name.split(".")
    return "model" + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in parts)


def first_difference(
    mine: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]
) -> tuple[str, torch.Tensor, torch.Tensor]:
    """The first parameter, in the model's order, where `mine` is not close to `theirs` (the
    first one when all are): its name and its two values, the one a message names."""
    name = next(
        (n for n in theirs if mine[n].shape != theirs[n].shape or not close(mine[n], theirs[n])),
        next(iter(theirs)),
    )
    return name, mine[name], theirs[name]


def plot_series(
    case: str, label: str, learner: Sequence[float | None], reference: Sequence[float | None]
) -> PlotSeries:
    """A chart's two lines, sampled at the same evenly spaced steps, at most MAX_PLOT_POINTS.

    However long the learner's trace, a report (and the page drawn from it) stays small.
    """
    length = max(len(learner), len(reference))
    if length <= MAX_PLOT_POINTS:
        indexes = list(range(length))
    else:
        indexes = sorted(
            {round(i * (length - 1) / (MAX_PLOT_POINTS - 1)) for i in range(MAX_PLOT_POINTS)}
        )

    def at(values: Sequence[float | None]) -> list[float | None]:
        return [values[i] if i < len(values) else None for i in indexes]

    return PlotSeries(
        case=case,
        label=label,
        learner=at(learner),
        reference=at(reference),
        steps=[i + 1 for i in indexes],
    )


@dataclass
class CaseFindings:
    """For one case, the first failure of each check (absent when the check passed): a `Said`,
    one of the kind's declared sentences with its values (`graders.sentences`), rendered when the
    grade is read; a plain text from a kind not yet converted is stored as said."""

    spec: CaseSpec
    failures: dict[str, str | Said] = field(default_factory=dict)

    def fail(self, check: str, message: str | Said) -> None:
        self.failures.setdefault(check, message)

    def where(self) -> str:
        return "a hidden case" if self.spec.hidden else f"case `{self.spec.id}`"

    def case(self) -> Said:
        """The case, said (a hidden case's findings are never read: `as_reported`)."""
        return IN_CASE(case=self.spec.id)

    def as_reported(self) -> CaseFindings:
        """What the report may read of these findings: for a hidden case, which checks it
        fails and no word of why (a finding's text holds the case's numbers)."""
        if not self.spec.hidden:
            return self
        return CaseFindings(self.spec, dict.fromkeys(self.failures, HIDDEN_FAILED()))


@dataclass(frozen=True)
class KindJudge:
    """How one exercise kind is judged.

    `checks` maps each check the kind knows to what it says when it passes; an exercise picks
    some of them, with points. `return_type` names the record field holding the type of what
    the learner's function returned, and the type the contract asks for.
    """

    checks: Mapping[str, str | Sentence]
    return_type: tuple[str, tuple[str, ...]]
    judge_case: Callable[[CaseSpec, CaseTrace, CaseTrace], CaseFindings]
    plots: Callable[[CaseSpec, CaseTrace, CaseTrace], list[PlotSeries]]


# All a learner is told of a check that fails in a hidden case: whatever made it fail there.
HIDDEN_CHECK_FAILURE = "Fails in a hidden case. Hidden cases show whether a check passes, not why."
HIDDEN_FAILED = Sentence("judging/hidden-case-fails", HIDDEN_CHECK_FAILURE)
MORE_VISIBLE = Sentence(
    "judging/more-visible-cases", "{first} ({count} visible cases fail this check.)"
)
ALSO_HIDDEN = Sentence("judging/also-hidden", "{first} It fails in a hidden case too.")


def check(
    check_id: str,
    points: float,
    passed_message: str | Sentence,
    findings: Sequence[CaseFindings],
) -> Check:
    """One check over all cases: it passes when no case failed it.

    Its message is a visible case's finding; a hidden case's findings are never read, only
    whether there is one (the choke point for judged hidden cases; grading.grade_runs is the
    one for hidden runs that failed).
    """
    failing = [f for f in findings if check_id in f.failures]
    shown = [f for f in failing if not f.spec.hidden]
    said: str | Said
    if shown:
        said = shown[0].failures[check_id]
        if len(shown) > 1:
            said = _more(said, MORE_VISIBLE, count=len(shown))
        if len(shown) < len(failing):
            said = _more(said, ALSO_HIDDEN)
    elif failing:
        said = HIDDEN_FAILED()
    else:
        said = passed_message() if isinstance(passed_message, Sentence) else passed_message
    return Check(
        id=check_id,
        passed=not failing,
        points=0 if failing else points,
        max_points=points,
        message=said if isinstance(said, str) else words_of(said),
        said=None if isinstance(said, str) else said,
        # A check is hidden when only hidden cases make it fail.
        hidden=bool(failing) and not shown,
    )


def _more(first: str | Said, sentence: Sentence, **values: Any) -> str | Said:
    """`first` with what `sentence` adds to it (a plain text from a kind not yet converted stays
    a plain text)."""
    if isinstance(first, str):
        return sentence.text.format(first=first, **values)
    return sentence(first=first, **values)


def same_value(name: str, a: Any, b: Any) -> bool:
    """Do two recorded values agree? Released and zeroed gradients count as the same."""
    if name.endswith("_grad") and (cleared(a) or cleared(b)):
        return cleared(a) and cleared(b)
    if a is None or b is None or isinstance(a, str | bool) or isinstance(b, str | bool):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        if any(v is None for v in a) or any(v is None for v in b):
            return all(same_value(name, u, v) for u, v in zip(a, b, strict=True))
    return close_numbers(a, b)


def same_record(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.keys() == b.keys() and all(
        same_value(name, a[name], b[name]) for name in a if name != "calls"
    )


def same_trace(a: CaseTrace, b: CaseTrace) -> bool:
    """Do two runs of a case agree on every recorded value (the call order aside)?"""
    return (
        len(a.records) == len(b.records)
        and all(same_record(r, s) for r, s in zip(a.records, b.records, strict=True))
        and same_record(a.final, b.final)
    )


def call_stream(trace: CaseTrace) -> list[str]:
    """Every zero_grad / backward / step the case saw, in order."""
    calls = [call for record in trace.records for call in record.get("calls", [])]
    if trace.final is not None:
        calls += trace.final.get("calls", [])
    return calls


# The diagnoses of a mistake more than one kind's models find (graders.diagnoses): each kind
# that trains over batches with the case's own optimizer (`dataloader-epoch`, `patience-fit`)
# computes its training without clearing and gives the code when the learner's parameters are
# those.
DECLARED: tuple[Declared, ...] = (
    Declared(
        code="grads-accumulated-across-batches",
        name="Gradients not cleared between batches",
        words=(
            "Your parameters are those of training whose gradients were never cleared between "
            "batches: PyTorch adds each new gradient to what `.grad` holds, so each update used "
            "the sum of its batch's gradient and every earlier batch's. Clear the gradients "
            "before each batch's backward pass."
        ),
        hint=Hint(
            where="Look at what `.grad` holds when a batch's `backward()` runs.",
            what=(
                "`backward()` adds to `.grad`; only `zero_grad()` empties it. Without it, every "
                "batch's step also carries the gradients of the batches before it."
            ),
            fix="""```python
for x, y in batches:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
```""",
        ),
    ),
)
