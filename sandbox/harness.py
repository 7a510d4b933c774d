"""The in-sandbox harness: builds each case, calls the learner's function, records what happened.

The same functions serve twice. Inside the sandbox, `main()` runs the learner's code and writes
the trace to the result channel (fd 3): everything in it is untrusted. Outside, the grader calls
`run_case` with the reference solution and the known buggy loops to get trusted trajectories.
So this file imports nothing of ours (it is shipped into the sandbox as one file) and touches no
process-wide torch state: no global seed, no monkeypatching, so the grader may run it in threads.
"""

from __future__ import annotations

import json
import os
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

SUBMISSION_FILENAME = "submission.py"
CASES_FILENAME = "cases.json"
SANDBOX_DIR = "/sandbox"
RESULT_FD = 3
# How far the learner's traceback and messages may go into the trace.
MAX_MESSAGE_CHARS = 2000


@dataclass
class Case:
    """One fixed-seed problem, ready to hand to the learner's function."""

    model: nn.Linear
    optimizer: torch.optim.Optimizer
    loss_fn: nn.Module
    batches: list[tuple[torch.Tensor, torch.Tensor]]


def build_case(spec: dict[str, Any]) -> Case:
    """Build the model, optimizer, loss and batches of a case from its spec, deterministically.

    Everything comes from one `torch.Generator` seeded by the case, so the grader outside the
    sandbox rebuilds exactly the same numbers. Stale gradients, when asked for, are planted in
    `.grad` as if an earlier backward() had run and nobody cleared it.
    """
    generator = torch.Generator().manual_seed(int(spec["seed"]))
    in_features, out_features = int(spec["in_features"]), int(spec["out_features"])
    model = nn.Linear(in_features, out_features)
    bound = in_features**-0.5
    with torch.no_grad():
        model.weight.copy_(
            torch.empty_like(model.weight).uniform_(-bound, bound, generator=generator)
        )
        model.bias.copy_(torch.empty_like(model.bias).uniform_(-bound, bound, generator=generator))
    true_weight = torch.randn(out_features, in_features, generator=generator)
    true_bias = torch.randn(out_features, generator=generator)
    batches = []
    for _ in range(int(spec["steps"])):
        x = torch.randn(int(spec["batch_size"]), in_features, generator=generator)
        noise = 0.1 * torch.randn(int(spec["batch_size"]), out_features, generator=generator)
        batches.append((x, x @ true_weight.T + true_bias + noise))
    if spec.get("stale_grads"):
        model.weight.grad = torch.randn(model.weight.shape, generator=generator)
        model.bias.grad = torch.randn(model.bias.shape, generator=generator)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=float(spec["lr"]), momentum=float(spec.get("momentum", 0.0))
    )
    return Case(model=model, optimizer=optimizer, loss_fn=nn.MSELoss(), batches=batches)


def _values(tensor: torch.Tensor | None) -> Any:
    return None if tensor is None else tensor.detach().tolist()


def _error_record(error: BaseException, filename: str) -> dict[str, Any]:
    """Describe an exception raised by learner code: type, message, the line in their file."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == filename]
    message = str(error)
    return {
        "type": type(error).__name__,
        "message": message[:MAX_MESSAGE_CHARS],
        "line": frames[-1].lineno if frames else None,
        "traceback": "".join(traceback.format_exception(error))[-MAX_MESSAGE_CHARS:],
        # An AttributeError on None is what reaching for a released .grad looks like.
        "grad_none": isinstance(error, AttributeError) and "'NoneType'" in message,
    }


def run_case(
    function: Callable[..., Any], spec: dict[str, Any], filename: str = SUBMISSION_FILENAME
) -> dict[str, Any]:
    """Call `function` once per batch of the case and record the state after every call.

    Records weights, bias, each `.grad` (None or values), the momentum buffer, the returned
    loss and its type, and the order of zero_grad / backward / step calls. Calls are seen
    through per-instance hooks, never by patching torch.
    """
    case = build_case(spec)
    model, optimizer = case.model, case.optimizer
    calls: list[str] = []

    def recording(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return method(*args, **kwargs)

        return wrapper

    optimizer.zero_grad = recording("zero_grad", optimizer.zero_grad)  # type: ignore[method-assign]
    model.zero_grad = recording("zero_grad", model.zero_grad)  # type: ignore[method-assign]
    optimizer.register_step_pre_hook(lambda *_: calls.append("step"))
    # Fires once per backward pass that reaches the weight, however backward was called.
    model.weight.register_hook(lambda grad: calls.append("backward"))  # type: ignore[no-untyped-call]

    steps: list[dict[str, Any]] = []
    error = None
    for x, y in case.batches:
        calls = []
        try:
            returned = function(model, optimizer, case.loss_fn, x.clone(), y.clone())
        except BaseException as exc:  # SystemExit too: the learner's code must not end the run
            error = _error_record(exc, filename)
            break
        if isinstance(returned, torch.Tensor) and returned.numel() == 1:
            loss: float | None = float(returned.detach())
        elif isinstance(returned, int | float) and not isinstance(returned, bool):
            loss = float(returned)
        else:
            loss = None
        buffer = optimizer.state.get(model.weight, {}).get("momentum_buffer")
        steps.append(
            {
                "weight": _values(model.weight),
                "bias": _values(model.bias),
                "weight_grad": _values(model.weight.grad),
                "bias_grad": _values(model.bias.grad),
                "momentum": _values(buffer),
                "loss": loss,
                "loss_type": type(returned).__name__,
                "calls": calls,
            }
        )
    return {"case": spec["id"], "steps": steps, "error": error}


def load_function(source: str, entry_point: str, filename: str) -> Callable[..., Any]:
    """Execute a source file as a fresh module and return its entry point.

    Raises SyntaxError, whatever the module raises at import, or LookupError when the entry
    point is missing or not callable.
    """
    code = compile(source, filename, "exec")
    module = types.ModuleType(os.path.splitext(os.path.basename(filename))[0])
    module.__file__ = filename
    exec(code, module.__dict__)
    function = module.__dict__.get(entry_point)
    if not callable(function):
        raise LookupError(entry_point)
    return function  # type: ignore[no-any-return]


def run_submission(source: str, entry_point: str, specs: list[dict[str, Any]]) -> dict[str, Any]:
    """Load the learner's code and run every case; the whole trace as one JSON-ready dict."""
    filename = SUBMISSION_FILENAME
    try:
        function = load_function(source, entry_point, filename)
    except SyntaxError as exc:
        return {
            "status": "syntax-error",
            "line": exc.lineno,
            "message": (exc.msg or "")[:MAX_MESSAGE_CHARS],
            "text": (exc.text or "").rstrip()[:MAX_MESSAGE_CHARS],
        }
    except LookupError:
        return {"status": "missing-function"}
    except BaseException as exc:
        return {"status": "load-error", "error": _error_record(exc, filename)}
    return {"status": "ran", "cases": [run_case(function, spec, filename) for spec in specs]}


def main() -> None:
    """Sandbox entry point: read the submission and cases, write the trace to fd 3."""
    channel = os.fdopen(RESULT_FD, "w")
    torch.set_num_threads(1)
    with open(os.path.join(SANDBOX_DIR, CASES_FILENAME)) as cases_file:
        request = json.load(cases_file)
    with open(os.path.join(SANDBOX_DIR, SUBMISSION_FILENAME)) as source_file:
        source = source_file.read()
    trace = run_submission(source, request["entry_point"], request["cases"])
    channel.write(json.dumps(trace))
    channel.close()


if __name__ == "__main__":
    main()
