"""The `evaluation` kind: a function that measures a model without training it,
`evaluate(model, loss_fn, x, y) -> float`.

The model is a small `nn.Sequential` (Linear, ReLU, Dropout, Linear) in training mode, or the
case's declared mlp, which must have dropout (`declared_model_problem`), with its declared loss:
so evaluation mode is observable: in training mode dropout zeroes activations at random. (No batch
norm: its training-mode forward is slow on a busy machine's intra-op threads in the grader's
process, which runs the known bugs, for no mistake dropout does not show as well.)
What the harness records of the one call, by hooks on the (first) dropout layer (never by patching
torch):
- `forwards`, `train_forwards`: forward passes through the model, and those made with dropout
  in training mode (`model.eval()` not called, or undone before the forward);
- `graph_forwards`: forward passes made with gradient recording on (`torch.is_grad_enabled()`):
  what `torch.no_grad()` (or `torch.inference_mode()`) turns off, so that autograd records no
  graph;
- `grads`: 1 when a parameter's `.grad` is set after the call (a `backward()` ran), and
  `weights_changed`: 1 when a parameter changed (a step, or an update by hand);
- `training_after`: 1 when every module is back in training mode after the call, and
  `grad_enabled_after`: 1 when gradient recording is on again (`torch.set_grad_enabled(False)`
  left behind would break the training that follows; the recorder turns it back on after);
- the returned value and its type.
The grader computes the right loss itself: the model in evaluation mode, under no_grad.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from graders.diagnoses import Declared, Hint
from graders.exercise import CaseSpec, Exercise
from graders.explanation import Explanation, Traces
from graders.harness import Record, build_case, number_of, type_name
from graders.judging import RAN_TO_THE_END, CaseFindings, KindJudge, then, within_tolerance
from graders.kind import ExerciseKind
from graders.quoting import learner_text
from graders.report import Diagnosis, PlotSeries
from graders.sentences import Said, Sentence
from graders.trace import CaseTrace, TraceShape, one_record_per_case


def build_evaluation_case(
    spec: dict[str, Any],
) -> tuple[nn.Module, nn.Module, torch.Tensor, torch.Tensor]:
    """The case's model, in training mode, its loss and one batch, all drawn from the case's
    generator: the declared model and loss (`model`, with dropout, and `loss`) built as every
    kind builds them, or the kind's own `Sequential` and MSE (run in the sandbox too: harness
    names only)."""
    if spec.get("model"):
        case = build_case(spec)
        x, y = case.inputs[0]
        case.model.train()
        return case.model, case.loss_fn, x, y
    generator = torch.Generator().manual_seed(int(spec["seed"]))
    in_features, hidden = int(spec["in_features"]), int(spec["hidden_features"])
    out_features, batch_size = int(spec["out_features"]), int(spec["batch_size"])
    model = nn.Sequential(
        nn.Linear(in_features, hidden),
        nn.ReLU(),
        nn.Dropout(float(spec["dropout"])),
        nn.Linear(hidden, out_features),
    )
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.empty_like(parameter).uniform_(-0.5, 0.5, generator=generator))
    x = torch.randn(batch_size, in_features, generator=generator)
    y = torch.randn(batch_size, out_features, generator=generator)
    model.train()
    return model, nn.MSELoss(), x, y


def record_evaluation(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> None:
    """One call on a model in training mode; what it did to the model and the autograd mode
    of its forward passes (run in the sandbox too: harness names and build_evaluation_case)."""
    model, loss_fn, x, y = build_evaluation_case(spec)
    seen = {"forwards": 0.0, "train_forwards": 0.0, "graph_forwards": 0.0}
    dropout = next(module for module in model.modules() if isinstance(module, nn.Dropout))

    def watch(module: Any, inputs: Any) -> None:
        seen["forwards"] += 1
        if dropout.training:
            seen["train_forwards"] += 1
        if torch.is_grad_enabled():
            seen["graph_forwards"] += 1

    dropout.register_forward_pre_hook(watch)
    before = [p.detach().clone() for p in model.parameters()]
    # Gradient recording on, as in a training script; whatever the call turns off in this
    # thread is undone after it, for the next case.
    with torch.enable_grad():
        returned = function(model, loss_fn, x.clone(), y.clone())
        grad_enabled_after = torch.is_grad_enabled()
    after = list(model.parameters())
    records.append(
        {
            "value": number_of(returned),
            "value_type": type_name(returned),
            **seen,
            "grads": float(any(p.grad is not None for p in after)),
            "weights_changed": float(
                len(after) != len(before)
                or any(not torch.equal(p.detach(), b) for p, b in zip(after, before, strict=False))
            ),
            "training_after": float(all(m.training for m in model.modules())),
            "grad_enabled_after": float(grad_enabled_after),
        }
    )


FACTS = (
    "forwards",
    "train_forwards",
    "graph_forwards",
    "grads",
    "weights_changed",
    "training_after",
    "grad_enabled_after",
)
TRACE = TraceShape(
    record_fields={"value": "number", "value_type": "text", **dict.fromkeys(FACTS, "number")},
    final_fields=None,
    most_records=one_record_per_case,
)


@functools.cache
def expected_loss(spec: CaseSpec) -> float:
    """The loss of the case's model in evaluation mode, computed here."""
    model, loss_fn, x, y = build_evaluation_case(spec.harness_spec())
    model.eval()
    with torch.no_grad():
        return float(loss_fn(model(x), y).item())


CHECKS = {
    "runs": RAN_TO_THE_END,
    "loss-correct": Sentence(
        "evaluation/passed-loss-correct",
        "Returns the model's loss in evaluation mode.",
    ),
    "eval-mode": Sentence(
        "evaluation/passed-eval-mode",
        "The loss you returned is the one with dropout off (evaluation mode).",
    ),
    # Nothing the grader can check shows a graph (a returned float carries none): this check
    # teaches, with no points (docs/security.md).
    "no-graph": Sentence(
        "evaluation/passed-no-graph",
        "No forward pass recorded an autograd graph (`torch.no_grad()`), as far as the harness "
        "saw: this check carries no points.",
    ),
    "gradients-untouched": Sentence(
        "evaluation/passed-gradients-untouched",
        "No `.grad` was set and no weight changed.",
    ),
    "training-mode-restored": Sentence(
        "evaluation/passed-training-mode",
        "The model is back in training mode, and gradient recording on, afterwards.",
    ),
    "returns-float": Sentence("evaluation/passed-returns-float", "Returns a Python float."),
}

# What the checks say (graders.sentences): what differs and by how much, the learner's first;
# a cause only from what the harness recorded.
AT_CASE = Sentence("evaluation/at-case", "In {case}")
NOTHING_NUMERIC = Sentence("evaluation/nothing-numeric", "nothing numeric")
LOSS_DIFFERS = Sentence(
    "evaluation/loss-differs",
    "{at}: you returned {shown:.6g}; the model's loss in evaluation mode is {right:.6g}.",
)
NOT_EVAL_LOSS = Sentence(
    "evaluation/not-eval-loss",
    "{at}: your loss, {shown:.6g}, is not the model's loss in evaluation mode, so it does not "
    "show that dropout was off.",
)
FORWARDS_IN_TRAINING = Sentence(
    "evaluation/forwards-in-training",
    "{train} of your {forwards} forward passes ran in training mode: dropout was active. Call "
    "`model.eval()` first.",
)
GRAPH_BUILT = Sentence(
    "evaluation/graph-built",
    "{at}: the forward pass ran with gradient recording on, so autograd built a graph that "
    "evaluation never uses. Run it inside `with torch.no_grad():`.",
)
GRAD_SET = Sentence(
    "evaluation/grad-set",
    "{at}: your function set `.grad` (a `backward()` ran). Evaluating must not train.",
)
WEIGHTS_CHANGED = Sentence(
    "evaluation/weights-changed",
    "{at}: your function changed the weights. Evaluating must not train.",
)
LEFT_IN_EVAL = Sentence(
    "evaluation/left-in-eval",
    "{at}: the model was left in evaluation mode, so the training that follows would run "
    "without dropout. Call `model.train()` before returning.",
)
GRAD_LEFT_OFF = Sentence(
    "evaluation/grad-left-off",
    "{at}: gradient recording was left off, so the training that follows could not run "
    "`backward()`. Turn it off for the forward pass only: `with torch.no_grad():`.",
)
NOT_FLOAT = Sentence(
    "evaluation/not-float",
    "{at}: your function returned a {type}, not a `float`. Use `.item()`.",
)


def judge_case(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> CaseFindings:
    findings = CaseFindings(spec)
    record = learner.records[0]
    at = AT_CASE(case=findings.case())
    right = expected_loss(spec)
    value = record["value"]
    if value is None or not within_tolerance(value, right):
        shown: Said | float = NOTHING_NUMERIC() if value is None else value
        findings.fail("loss-correct", LOSS_DIFFERS(at=at, shown=shown, right=right))
        # eval-mode is decided from the value alone (DESIGN.md, invariant 9): the forwards are
        # counted by the harness's hooks, which the code can blind. Dropout active changes the
        # loss; the forwards seen in training mode only say why.
        seen = (
            FORWARDS_IN_TRAINING(
                train=int(record["train_forwards"]), forwards=int(record["forwards"])
            )
            if record["train_forwards"]
            else None
        )
        findings.fail("eval-mode", then(NOT_EVAL_LOSS(at=at, shown=shown), seen))
    if record["graph_forwards"]:
        findings.fail("no-graph", GRAPH_BUILT(at=at))
    if record["grads"] or record["weights_changed"]:
        findings.fail(
            "gradients-untouched", (GRAD_SET if record["grads"] else WEIGHTS_CHANGED)(at=at)
        )
    if not record["training_after"]:
        findings.fail("training-mode-restored", LEFT_IN_EVAL(at=at))
    elif not record["grad_enabled_after"]:
        findings.fail("training-mode-restored", GRAD_LEFT_OFF(at=at))
    if record["value_type"] != "float":
        findings.fail("returns-float", NOT_FLOAT(at=at, type=learner_text(record["value_type"])))
    return findings


def plots(spec: CaseSpec, learner: CaseTrace, reference: CaseTrace) -> list[PlotSeries]:
    return []


def evaluation_models(kind: ExerciseKind, exercise: Exercise, traces: Traces) -> list[Explanation]:
    """The mistakes the recorded facts show, in the lesson's order. Each is a fact of the run
    (a forward in training mode that changed the loss, a graph recorded, a gradient set, the
    mode left)."""
    found: set[Diagnosis] = set()
    for spec in exercise.cases:
        record = traces[spec.id].records[0] if traces[spec.id].records else None
        if record is None:
            return []
        value = record["value"]
        # A forward in training mode beside the one that gave the right loss is not the
        # mistake: the loss must show dropout active.
        if record["train_forwards"] and (
            value is None or not within_tolerance(value, expected_loss(spec))
        ):
            found.add("missing-eval")
        if record["graph_forwards"]:
            found.add("missing-no-grad")
        if record["grads"] or record["weights_changed"]:
            found.add("gradients-in-evaluation")
        if not record["training_after"]:
            found.add("left-in-eval-mode")
    order: tuple[Diagnosis, ...] = (
        "missing-eval",
        "gradients-in-evaluation",
        "missing-no-grad",
        "left-in-eval-mode",
    )
    codes = tuple(code for code in order if code in found)
    return [Explanation(codes, "evaluation")] if codes else []


JUDGE = KindJudge(
    checks=CHECKS,
    return_type=("value_type", ("float",)),
    judge_case=judge_case,
    plots=plots,
)


# The diagnoses only this kind's models give (graders.diagnoses).
DIAGNOSES: tuple[Declared, ...] = (
    Declared(
        code="missing-eval",
        hint=Hint(
            where="Look at the model's mode when its forward pass runs.",
            what=(
                "The forward pass ran in training mode, so dropout was still switching units "
                "off at random and the loss is not the model's evaluation loss."
            ),
            fix="""Switch to evaluation mode before the forward pass:

```python
model.eval()
with torch.no_grad():
    loss = loss_fn(model(x), y).item()
model.train()
return loss
```""",
            lesson="eval-mode",
        ),
        name="Evaluated in training mode",
        words=(
            "Your function measured the model in training mode: dropout zeroed activations at "
            "random, so the loss is not the model's. Call `model.eval()` before the forward "
            "pass."
        ),
    ),
    Declared(
        code="gradients-in-evaluation",
        hint=Hint(
            where=(
                "Look for `backward()`, `step()` or anything that writes to the weights in your "
                "function."
            ),
            what=(
                "Evaluation measures the model; it must not change it. Your function computed "
                "gradients (or changed a weight), which leaves `.grad` filled for the next "
                "training step."
            ),
            fix="""Only measure: no backward pass, no step:

```python
model.eval()
with torch.no_grad():
    loss = loss_fn(model(x), y).item()
model.train()
return loss
```""",
            lesson="no-grad",
        ),
        name="Trained while evaluating",
        words=(
            "Your function trains while it evaluates: it computed gradients (setting `.grad`) "
            "or changed the weights. Evaluation only measures: a forward pass and the loss, "
            "nothing more."
        ),
    ),
    Declared(
        code="missing-no-grad",
        hint=Hint(
            where="Look at whether autograd is recording while the forward pass runs.",
            what=(
                "The forward pass ran with gradient recording on, so autograd built a graph "
                "nobody will use. Detaching the result afterwards is too late: the graph was "
                "already built."
            ),
            fix="""Run the forward pass under `torch.no_grad()`:

```python
with torch.no_grad():
    loss = loss_fn(model(x), y).item()
```""",
            lesson="no-grad",
        ),
        name="Graph recorded while evaluating",
        words=(
            "Your forward pass ran with gradient recording on, so autograd built a graph (and "
            "kept the activations) for a backward pass that never comes. Run it inside `with "
            "torch.no_grad():`."
        ),
    ),
    Declared(
        code="left-in-eval-mode",
        hint=Hint(
            where="Look at the model's mode when your function returns.",
            what=(
                "The model is left in evaluation mode, so the training that follows would run "
                "with dropout switched off."
            ),
            fix="""Put the model back in training mode before returning:

```python
model.eval()
with torch.no_grad():
    loss = loss_fn(model(x), y).item()
model.train()
return loss
```""",
            lesson="eval-mode",
        ),
        name="Left in evaluation mode",
        words=(
            "Your function leaves the model in evaluation mode: the training that follows would "
            "run without dropout. Call `model.train()` before returning."
        ),
    ),
)


def declared_model_problem(spec: CaseSpec) -> str | None:
    """A declared model must have dropout, the one thing evaluation mode changes here: without
    it a forward in training mode gives the right loss, and no check could see it. The kind's
    own model's settings (`hidden_features`, `dropout`) say nothing of a declared one."""
    declared = spec.model_fields_set
    if "model" not in declared:
        if "loss" in declared:
            return (
                "loss: kind 'evaluation' reads a loss with a declared model only (its own "
                'model is measured with MSE): add model = {kind = "mlp", hidden = [8], '
                "dropout = 0.5}, or remove it"
            )
        return None
    if spec.model.dropout is None:
        return (
            "model: kind 'evaluation' needs a model with dropout (model.dropout), which only "
            "evaluation mode turns off: without it a forward pass in training mode gives the "
            'same loss, and no check could tell. Declare e.g. model = {kind = "mlp", hidden = '
            "[8], dropout = 0.5}"
        )
    kept = sorted(declared & {"hidden_features", "dropout"})
    if kept:
        return (
            f"{', '.join(map(repr, kept))}: the settings of kind 'evaluation''s own model, which "
            "a declared model replaces: say them in the model (hidden, dropout) and remove them"
        )
    return None


KIND = ExerciseKind(
    name="evaluation",
    summary="A function that measures a model in evaluation mode, under no_grad, without "
    "training it, and leaves it in training mode.",
    record=record_evaluation,
    case_settings=frozenset({"hidden_features", "dropout", "model", "loss", "model.dropout"}),
    case_problem=declared_model_problem,
    trace=TRACE,
    judge=JUDGE,
    models=evaluation_models,
    sandbox_helpers=(build_evaluation_case,),
    diagnoses=DIAGNOSES,
)
