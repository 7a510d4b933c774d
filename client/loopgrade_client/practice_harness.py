"""The in-sandbox harness: builds each case, calls the learner's function, records what happened.

Kept whole: it is shipped into the sandbox as one program, so it imports nothing of ours.

The same functions serve twice. Inside the sandbox, `main()` runs the learner's code and writes
the trace to the result channel (fd 3): everything in it is untrusted. Outside, the grader calls
`run_case` with the reference solution and the known buggy loops to get trusted trajectories.
It is shipped into the sandbox as text: this file, then the recorders of every exercise kind
(each declared in its module under graders/kinds; `graders.kinds.SANDBOX_PROGRAM`), which fill
`RECORDERS`. So it imports nothing of ours and, in the grader's process, sets no global seed
and changes torch only by two wrappers that do nothing outside a watched case
(`_install_watch`), so the grader may run it in threads. In the sandbox
(`main`), the global random generators are seeded from each case before learner code runs
(`seed_global_random`).

A kind's recorder says how to call the learner's function on a case and what to record. A
record is a flat dict of named values: tensors as nested lists, `.grad` as None or values, the
returned value and its type, and the calls the step made.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import json
import linecache
import math
import os
import random
import sys
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

SUBMISSION_FILENAME = "submission.py"
CASES_FILENAME = "cases.json"
SANDBOX_DIR = "/sandbox"
RESULT_FD = 3
# Closed once the trusted set-up is done: the sandbox counts the learner's CPU from there on
# (sandbox/supervise.py).
START_FD = 4
# A byte written here asks the sandbox for the later cases, which then come on stdin.
REQUEST_FD = 5
# How far the learner's traceback and messages may go into the trace.
MAX_MESSAGE_CHARS = 2000
# What one record may hold of things the learner decides: the calls a step made, a type name.
MAX_CALLS_PER_RECORD = 100
MAX_TYPE_NAME_CHARS = 100

Record = dict[str, Any]


class Case:
    """One fixed-seed problem, ready to hand to the learner's function.

    `inputs[t]` is what call t gets: one `(x, y)` batch, or for micro-batch cases a list of them.
    A plain class, not a dataclass: this module is executed afresh in every sandbox run, and a
    dataclass compiles its generated methods each time it is made.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: nn.Module,
        inputs: list[Any],
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.inputs = inputs


ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


def build_model(spec: dict[str, Any], generator: torch.Generator) -> nn.Module:
    """The case's model (graders.exercise.ModelSpec), its parameters drawn from `generator`
    layer by layer, weight then bias, each uniform in +-1/sqrt(fan_in) as torch's default. An
    mlp's dropout layers (after each activation) are in training mode, as the model is."""
    declared = spec.get("model") or {}
    in_features, out_features = int(spec["in_features"]), int(spec["out_features"])
    if declared.get("kind", "linear") == "linear":
        layers: list[nn.Linear] = [nn.Linear(in_features, out_features)]
        model: nn.Module = layers[0]
    else:
        widths = [in_features, *(int(w) for w in declared["hidden"]), out_features]
        layers = [nn.Linear(a, b) for a, b in itertools.pairwise(widths)]
        activation = ACTIVATIONS[declared.get("activation") or "relu"]
        dropout = declared.get("dropout")
        between: list[nn.Module] = []
        for layer in layers:
            between += [layer, activation()]
            if dropout is not None:
                between.append(nn.Dropout(float(dropout)))
        model = nn.Sequential(*between[: -2 if dropout is not None else -1])
    with torch.no_grad():
        for layer in layers:
            bound = layer.in_features**-0.5
            for parameter in (layer.weight, layer.bias):
                parameter.copy_(
                    torch.empty_like(parameter).uniform_(-bound, bound, generator=generator)
                )
    return model


def build_loss(spec: dict[str, Any]) -> nn.Module:
    return nn.CrossEntropyLoss() if spec.get("loss") == "cross-entropy" else nn.MSELoss()


def build_case(spec: dict[str, Any]) -> Case:
    """Build the model, optimizer, loss and batches of a case from its spec, deterministically.

    Everything comes from one `torch.Generator` seeded by the case, so the grader outside the
    sandbox rebuilds exactly the same numbers. The targets come from a random linear teacher
    with noise: its outputs for mse, the index of its largest output (a class) for
    cross-entropy. Stale gradients, when asked for, are planted in `.grad` as if an earlier
    backward() had run and nobody cleared it.
    """
    generator = torch.Generator().manual_seed(int(spec["seed"]))
    in_features, out_features = int(spec["in_features"]), int(spec["out_features"])
    batch_size = int(spec["batch_size"])
    model = build_model(spec, generator)
    true_weight = torch.randn(out_features, in_features, generator=generator)
    true_bias = torch.randn(out_features, generator=generator)
    classes = spec.get("loss") == "cross-entropy"

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch_size, in_features, generator=generator)
        noise = 0.1 * torch.randn(batch_size, out_features, generator=generator)
        y = x @ true_weight.T + true_bias + noise
        return x, (y.argmax(dim=1) if classes else y)

    micro_batches = int(spec.get("micro_batches", 0))
    inputs: list[Any] = [
        [batch() for _ in range(micro_batches)] if micro_batches else batch()
        for _ in range(int(spec["steps"]))
    ]
    if spec.get("stale_grads"):
        for parameter in model.parameters():
            parameter.grad = torch.randn(parameter.shape, generator=generator)
    optimizer = build_optimizer(list(model.parameters()), spec)
    return Case(model=model, optimizer=optimizer, loss_fn=build_loss(spec), inputs=inputs)


def build_optimizer(parameters: list[torch.Tensor], spec: dict[str, Any]) -> torch.optim.Optimizer:
    """The `torch.optim` optimizer a case declares (graders/optimizers.py validates the fields).

    The one place it is built: in the sandbox, and by the grader for its own references.
    """
    name, lr = spec.get("optimizer", "sgd"), float(spec["lr"])
    weight_decay = float(spec.get("weight_decay") or 0.0)
    if name == "sgd":
        return torch.optim.SGD(
            parameters,
            lr=lr,
            momentum=float(spec.get("momentum") or 0.0),
            dampening=float(spec.get("dampening") or 0.0),
            nesterov=bool(spec.get("nesterov")),
            weight_decay=weight_decay,
        )
    if name not in ("adam", "adamw"):
        raise ValueError(f"no optimizer {name!r}")
    beta1, beta2 = spec.get("betas") or (0.9, 0.999)
    return (torch.optim.Adam if name == "adam" else torch.optim.AdamW)(
        parameters,
        lr=lr,
        betas=(float(beta1), float(beta2)),
        eps=float(spec.get("eps") or 1e-8),
        weight_decay=weight_decay,
        amsgrad=bool(spec.get("amsgrad")),
    )


def build_mlp(spec: dict[str, Any], generator: torch.Generator) -> nn.Sequential:
    """`nn.Sequential(Linear, ReLU, Linear)` of the case's sizes (`hidden_features` wide), its
    parameters drawn from `generator`: the model of the kinds that train a small MLP."""
    model = nn.Sequential(
        nn.Linear(int(spec["in_features"]), int(spec["hidden_features"])),
        nn.ReLU(),
        nn.Linear(int(spec["hidden_features"]), int(spec["out_features"])),
    )
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.empty_like(parameter).uniform_(-0.5, 0.5, generator=generator))
    return model


def flat_parameters(model: nn.Module) -> list[float]:
    """Every parameter of a model, flattened in `model.parameters()` order, as numbers."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def optimizer_state(optimizer: torch.optim.Optimizer, parameter: torch.Tensor) -> Record:
    """What the optimizer keeps for one parameter after a call (graders.optimizers.STATE_FIELDS)."""
    state = optimizer.state.get(parameter, {})
    step = state.get("step")
    return {
        "momentum": values_of(state.get("momentum_buffer")),
        "exp_avg": values_of(state.get("exp_avg")),
        "exp_avg_sq": values_of(state.get("exp_avg_sq")),
        "max_exp_avg_sq": values_of(state.get("max_exp_avg_sq")),
        "opt_step": None if step is None else number_of(step),
    }


def values_of(tensor: Any) -> Any:
    return tensor.detach().tolist() if isinstance(tensor, torch.Tensor) else None


def number_of(value: Any) -> float | None:
    """A returned loss or magnitude as a number, whatever its type; None if it is not one.

    An int too large for a float (`10**400`) is an infinity, as the grader will say.
    """
    try:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return float(value.detach())
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError, RuntimeError):  # a complex tensor, say
        return None
    return None


def type_name(value: Any) -> str:
    return type(value).__name__[:MAX_TYPE_NAME_CHARS]


def parameters_of(model: nn.Module) -> Record:
    """Each parameter's values under its name (`weight`, `0.weight`), then its `.grad` under
    the name and `_grad` (None when there is none)."""
    named = list(model.named_parameters())
    return {
        **{name: values_of(parameter) for name, parameter in named},
        **{f"{name}_grad": values_of(parameter.grad) for name, parameter in named},
    }


def first_parameter(model: nn.Module) -> torch.Tensor:
    """The parameter the recorders watch, and whose optimizer state they record: the first
    layer's weight."""
    return next(iter(model.parameters()))


def _error_record(error: BaseException, filename: str) -> Record:
    """Describe an exception raised by learner code: type, message, the line in their file."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == filename]
    # The traceback from the learner's first frame on (what their code called stays: torch's
    # frames say where a shape went wrong); the harness's own frames above it are not theirs.
    learners = _without_watch_frames(error.__traceback__)
    while learners is not None and learners.tb_frame.f_code.co_filename != filename:
        learners = learners.tb_next
    try:  # the learner's exception may define a __str__ that raises
        message = str(error)
        if learners is None:  # raised outside their code: only what it was
            formatted = "".join(traceback.format_exception_only(error))
        else:
            formatted = "".join(traceback.format_exception(type(error), error, learners))
    except Exception:
        message = formatted = "(the exception's message could not be read)"
    return {
        "type": type_name(error),
        "message": message[:MAX_MESSAGE_CHARS],
        "line": frames[-1].lineno if frames else None,
        "traceback": formatted[-MAX_MESSAGE_CHARS:],
        # An AttributeError on None is what reaching for a released .grad looks like.
        "grad_none": isinstance(error, AttributeError) and "'NoneType'" in message,
    }


class BackwardWatch:
    """The case running in this thread, watched (`run_case`): its recorders, told of each
    `backward()` the code calls and each optimizer it makes of the weight (`_install_watch`)."""

    def __init__(self) -> None:
        self.recorders: list[CallRecorder] = []
        # A backward() of the case's is running: torch.autograd.backward called inside it (by
        # Tensor.backward, or by a hook) is part of that one.
        self.in_backward = False


def _install_watch() -> contextvars.ContextVar[BackwardWatch | None]:
    """Wrap `torch.autograd.backward` and `Optimizer.add_param_group`, once in this process; the
    context variable their wrappers read, which `run_case` sets for the case it runs.

    The wrappers only see what a case needs to be told: a backward that returns without its
    gradient ever reaching the weight ran on a loss cut off from the model (`.detach()`,
    `.data`, `requires_grad = True` set on the loss), recorded as `detached_backward`, which is
    not a `backward`; and an optimizer made of the weight, whose calls are then recorded too
    (`CallRecorder.watch_optimizer`). `Tensor.backward` calls `torch.autograd.backward`, and
    every optimizer's `__init__` calls `add_param_group`: no other torch call goes through
    Python for them (a torch function mode, seeing every call, cost 0.11 ms a training step).

    Patching torch is safe here because each wrapper is inert outside a watched case: a
    context variable, so a thread of the grader sees only the case it runs itself (threads
    start with an empty context), and a thread with no watched case just calls through. Learner
    code that undoes them only loses the naming of its own mistake. This file runs again in each
    warm pool job, in a process where the zygote's run of it installed them already: that copy
    reads the context variable the installed wrappers read.
    """
    installed = getattr(torch.autograd.backward, "watched", None)
    if isinstance(installed, contextvars.ContextVar):
        return installed
    watched: contextvars.ContextVar[BackwardWatch | None] = contextvars.ContextVar(
        "watched", default=None
    )
    backward = torch.autograd.backward
    add_param_group = torch.optim.Optimizer.add_param_group

    @functools.wraps(backward)
    def watched_backward(*args: Any, **kwargs: Any) -> Any:
        watch = watched.get()
        if watch is None or watch.in_backward or not watch.recorders:
            return backward(*args, **kwargs)
        recorders = list(watch.recorders)
        before = [recorder.arrivals for recorder in recorders]
        watch.in_backward = True
        try:
            result = backward(*args, **kwargs)
        finally:
            watch.in_backward = False
        for recorder, arrivals in zip(recorders, before, strict=True):
            if recorder.arrivals == arrivals:
                recorder._append("detached_backward")
        return result

    @functools.wraps(add_param_group)
    def watched_add_param_group(
        optimizer: torch.optim.Optimizer, param_group: dict[str, Any]
    ) -> None:
        add_param_group(optimizer, param_group)
        watch = watched.get()
        if watch is None or not isinstance(optimizer, torch.optim.Optimizer):
            return
        for recorder in watch.recorders:
            if any(parameter is recorder.weight for parameter in param_group["params"]):
                recorder.watch_optimizer(optimizer)

    watched_backward.watched = watched  # type: ignore[attr-defined]
    torch.autograd.backward = watched_backward
    torch.optim.Optimizer.add_param_group = watched_add_param_group  # type: ignore[method-assign, assignment]
    return watched


_WATCHED = _install_watch()
# The installed wrappers' code: their frames are no part of a learner's traceback.
_WATCH_CODES = (torch.autograd.backward.__code__, torch.optim.Optimizer.add_param_group.__code__)


def _without_watch_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A traceback without the frames of the watch's wrappers (`_install_watch`): what the
    learner's code called, as it would read without them."""
    kept = []
    while tb is not None:
        if tb.tb_frame.f_code not in _WATCH_CODES:
            kept.append(tb)
        tb = tb.tb_next
    for node, after in zip(kept, [*kept[1:], None], strict=True):
        node.tb_next = after
    return kept[0] if kept else None


class CallRecorder:
    """Sees zero_grad, backward and step through per-instance hooks (torch's own functions are
    wrapped only to see what no hook can: `BackwardWatch`).

    A `backward` is a pass that accumulated into the weight's `.grad`: seen by the autograd
    engine's post-accumulate hook, during that engine's pass, with `.grad` after it equal to
    `.grad` before it plus the gradient the pass brought (a tensor hook, run before, saw both),
    and that gradient not all zeros. `torch.autograd.grad()` (which fires tensor hooks and
    accumulates nothing), a hook called by hand, `.grad` assigned, and a pass of a zero loss
    are not one. A backward() whose gradient never reached the weight is a `detached_backward`
    (`_install_watch`, when the case is watched).
    """

    def __init__(self, case: Case, on_step: Callable[[], None] | None = None) -> None:
        self.calls: list[str] = []
        self.arrivals = 0  # gradients that reached the weight (the tensor hook ran)
        watch = _WATCHED.get()
        if watch is not None:
            watch.recorders.append(self)
        model, optimizer = case.model, case.optimizer
        self._on_step = on_step
        self._optimizers: list[torch.optim.Optimizer] = []
        self.watch_optimizer(optimizer)
        model.zero_grad = self._recording("zero_grad", model.zero_grad)  # type: ignore[method-assign]
        # (engine pass, the gradient it brings, `.grad` before it), from the tensor hook
        self._incoming: tuple[int, torch.Tensor, torch.Tensor | None] | None = None
        self.weight = weight = first_parameter(model)
        weight.register_hook(lambda grad: self._arriving(weight, grad))  # type: ignore[no-untyped-call]
        weight.register_post_accumulate_grad_hook(self._accumulated)  # type: ignore[no-untyped-call]

    def watch_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Record an optimizer's zero_grad and step: the case's, or one the code made of the
        weight (`_install_watch` sees it made: `new_optimizer`, then its calls as any other's)."""
        if any(optimizer is seen for seen in self._optimizers):
            return
        if self._optimizers:
            self._append("new_optimizer")
        self._optimizers.append(optimizer)
        optimizer.zero_grad = self._recording("zero_grad", optimizer.zero_grad)  # type: ignore[method-assign]
        optimizer.register_step_pre_hook(lambda *_: self._append("step"))
        on_step = self._on_step
        if on_step is not None:
            optimizer.register_step_post_hook(lambda *_: on_step())

    def _arriving(self, weight: torch.Tensor, grad: torch.Tensor) -> None:
        self.arrivals += 1
        before = None if weight.grad is None else weight.grad.detach().clone()
        self._incoming = (_engine_pass(), grad.detach().clone(), before)

    def _accumulated(self, weight: torch.Tensor) -> None:
        incoming, self._incoming = self._incoming, None
        engine_pass = _engine_pass()
        if incoming is None or engine_pass < 0 or incoming[0] != engine_pass:
            return
        _, grad, before = incoming
        expected = grad if before is None else before + grad
        if (
            weight.grad is not None
            and bool(grad.any())
            and weight.grad.shape == expected.shape
            and torch.allclose(weight.grad, expected, rtol=1e-6, atol=0.0)
        ):
            self._append("backward")

    def _recording(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._append(name)
            return method(*args, **kwargs)

        return wrapper

    def _append(self, name: str) -> None:
        if len(self.calls) < MAX_CALLS_PER_RECORD:
            self.calls.append(name)

    def take(self) -> list[str]:
        """The calls since the last take."""
        calls, self.calls = self.calls, []
        return calls


def _engine_pass() -> int:
    """The autograd engine's pass running now (-1 outside one): a hook that the engine did not
    call, or called for another pass, is not that pass accumulating."""
    return int(torch._C._current_graph_task_id())


# A kind's recorder: (the function to call, the case's spec, the records to append to) -> the
# final record, or None for kinds that make none.
Recorder = Callable[[Callable[..., Any], dict[str, Any], list[Record]], Record | None]
# Filled in the sandbox by the kinds' recorders appended to this file, by kind name.
RECORDERS: dict[str, Recorder] = {}


def seed_global_random(seed: int) -> None:
    """Seed torch's, numpy's and Python's global generators from a case.

    Learner code may draw from them unseeded. A cold run would start from torch's fixed default
    seed and a random one for the others, a warm pool's child from whatever its zygote drew: so
    a run draws the same numbers whether cold or warm, and again when graded again.
    """
    # The CPU's generator, the only device here: torch.manual_seed also queues the seed for
    # CUDA and XPU, formatting the stack each time (traceback.format_stack reads source files),
    # a fifth of a grading's CPU in the sandbox (docs/performance.md).
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")  # torch imports it when it is installed
    if numpy is not None:
        numpy.random.seed(seed)


def run_case(
    recorder: Recorder,
    function: Callable[..., Any],
    spec: dict[str, Any],
    filename: str = SUBMISSION_FILENAME,
    seeded: bool = False,
    watched: bool = True,
) -> dict[str, Any]:
    """Run one case with a kind's recorder; the records made, and the learner's error if any.

    For step-by-step kinds the records made before an error are kept, to say which step failed.
    `seeded`: seed the global generators from the case first (in the sandbox only). `watched`:
    its recorders are told of a detached backward() and an optimizer made of the weight
    (`BackwardWatch`); the grader's replayed models (graders/replay.py) make no such mark.
    """
    records: list[Record] = []
    final = None
    error = None
    if seeded:
        seed_global_random(int(spec["seed"]))
    token = _WATCHED.set(BackwardWatch() if watched else None)
    try:
        final = recorder(function, spec, records)
    except BaseException as exc:  # SystemExit too: the learner's code must not end the run
        error = _error_record(exc, filename)
    finally:
        _WATCHED.reset(token)
    return {"case": spec["id"], "records": records, "final": final, "error": error}


def compile_submission(source: str, filename: str = SUBMISSION_FILENAME) -> types.CodeType:
    """The learner's source compiled as it is run here: the server checks a submission's
    syntax with this very function before it spends a grading run on it.

    Raises SyntaxError (and ValueError for a NUL byte).
    """
    return compile(source, filename, "exec")


def load_function(source: str, entry_point: str, filename: str) -> Callable[..., Any]:
    """Execute a source file as a fresh module and return its entry point.

    Raises SyntaxError, whatever the module raises at import, or LookupError when the entry
    point is missing or not callable.
    """
    code = compile_submission(source, filename)
    # Their lines in their tracebacks: the file is nowhere on disk for `linecache` to read.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(os.path.splitext(os.path.basename(filename))[0])
    module.__file__ = filename
    exec(code, module.__dict__)
    function = module.__dict__.get(entry_point)
    if not callable(function):
        raise LookupError(entry_point)
    return function  # type: ignore[no-any-return]


def load_submission(
    source: str, entry_point: str, specs: list[dict[str, Any]], seeded: bool = False
) -> Callable[..., Any] | dict[str, Any]:
    """Load the learner's code: its entry point, or the failure to report instead of cases.

    `seeded`: seed the global generators from the first case before loading (in the sandbox
    only: it changes this process's generators).
    """
    if seeded and specs:
        seed_global_random(int(specs[0]["seed"]))
    try:
        return load_function(source, entry_point, SUBMISSION_FILENAME)
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
        return {"status": "load-error", "error": _error_record(exc, SUBMISSION_FILENAME)}


def run_cases(
    recorder: Recorder,
    function: Callable[..., Any],
    specs: list[dict[str, Any]],
    seeded: bool = False,
) -> dict[str, Any]:
    """Run every case on a loaded entry point; the trace as one JSON-ready dict.

    `seeded`: seed the global generators from each case before it runs (in the sandbox only).
    """
    return {
        "status": "ran",
        "cases": [
            run_case(recorder, function, spec, SUBMISSION_FILENAME, seeded) for spec in specs
        ],
    }


def run_submission(
    source: str,
    recorder: Recorder,
    entry_point: str,
    specs: list[dict[str, Any]],
    seeded: bool = False,
) -> dict[str, Any]:
    """Load the learner's code and run every case; the whole trace as one JSON-ready dict."""
    loaded = load_submission(source, entry_point, specs, seeded)
    if isinstance(loaded, dict):
        return loaded
    return run_cases(recorder, loaded, specs, seeded)


def warm_up() -> None:
    """A trusted training step, so that torch's lazy imports happen before the learner's code.

    The first optimizer step imports torch._dynamo (about a second of CPU): paid here, it never
    counts against the learner. It draws no random numbers, so the learner's get the same ones.
    A process that has stepped already has nothing left to import: a warm pool's child, whose
    zygote ran this harness once before forking it, skips the step (its first touch of torch's
    memory costs the child copy-on-write faults, a few milliseconds of every run).
    """
    if "torch._dynamo" in sys.modules:
        return
    weight = nn.Parameter(torch.zeros(1, 2))
    optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
    for _ in range(2):
        optimizer.zero_grad()
        loss = nn.MSELoss()(torch.ones(4, 2) @ weight.T, torch.ones(4, 1))
        loss.backward()
        optimizer.step()
    loss.item()


def end_setup() -> None:
    """Tell the sandbox that the trusted set-up is over: write the CPU seconds used, close fd 4."""
    try:
        os.write(START_FD, f"{time.process_time():.6f}".encode())
        os.close(START_FD)
    except OSError:
        pass  # run by hand, outside a sandbox: nobody is counting


def main() -> None:
    """Sandbox entry point: read the submission and cases, write the trace to fd 3.

    With cases to come (`later_cases`, the hidden ones) and code that loaded, it then asks for
    them (a byte on fd 5), reads them from stdin, and writes their trace after the first. The
    sandbox gives them only once asked, after everything written before the request is in
    (sandbox/supervise.py).
    """
    # The harness's own copies: the learner's code may close or replace fds 0, 3 and 5.
    channel = os.fdopen(os.dup(RESULT_FD), "w")
    request_fd, later_input = os.dup(REQUEST_FD), os.fdopen(os.dup(0), "rb")
    torch.set_num_threads(1)
    with open(os.path.join(SANDBOX_DIR, CASES_FILENAME)) as cases_file:
        request = json.load(cases_file)
    with open(os.path.join(SANDBOX_DIR, SUBMISSION_FILENAME)) as source_file:
        source = source_file.read()
    warm_up()
    end_setup()  # nothing of the learner's has run yet
    recorder = RECORDERS[request["kind"]]
    loaded = load_submission(source, request["entry_point"], request["cases"], seeded=True)
    if isinstance(loaded, dict):  # did not load: the visible failure it is, no hidden part
        channel.write(json.dumps(loaded))
    else:
        channel.write(json.dumps(run_cases(recorder, loaded, request["cases"], seeded=True)))
        channel.flush()
        # The module loaded once serves the hidden cases too: its top-level code (a demo loop
        # left in) never runs in their part, whose budget is then the cases' time alone.
        if request.get("later_cases"):
            for stream in (sys.stdout, sys.stderr):  # what the first cases printed goes first
                with contextlib.suppress(Exception):  # the learner's to break: their output
                    stream.flush()
            os.write(request_fd, b"?")
            later_cases = json.loads(later_input.read())
            channel.write(json.dumps(run_cases(recorder, loaded, later_cases, seeded=True)))
    channel.close()
    # Ended here, not by the interpreter's exit: torch's teardown costs most of a second of CPU
    # on a busy machine, which would count against the hidden cases' own budget
    # (graders.grading.HiddenBudget). Threads the learner's code left are stopped either way.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def record_steps(function: Callable[..., Any], spec: dict[str, Any], records: list[Record]) -> None:
    """One call per input, the state after each (run in the sandbox too: harness names only)."""
    case = build_case(spec)
    model, optimizer = case.model, case.optimizer
    recorder = CallRecorder(case)
    for given in case.inputs:
        if isinstance(given, list):
            arguments: Any = [(x.clone(), y.clone()) for x, y in given]
            returned = function(model, optimizer, case.loss_fn, arguments)
        else:
            x, y = given
            extra = () if spec.get("max_norm") is None else (float(spec["max_norm"]),)
            returned = function(model, optimizer, case.loss_fn, x.clone(), y.clone(), *extra)
        records.append(
            {
                **parameters_of(model),
                **optimizer_state(optimizer, first_parameter(model)),
                "loss": number_of(returned),
                "loss_type": type_name(returned),
                "calls": recorder.take(),
            }
        )


RECORDERS['step-function'] = record_steps


def most_loop_records(spec: dict[str, Any]) -> int:
    """The most optimizer steps (and returned losses) a case records: four times the steps a
    right loop makes, enough to see a loop that steps twice per batch, bounded whatever the
    learner's loop does."""
    return 4 * int(spec["epochs"]) * int(spec["steps"])


def record_loop(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """One call that trains for several epochs; the state after every step (run in the sandbox
    too: harness names and most_loop_records only)."""
    case = build_case(spec)

    most = most_loop_records(spec)

    def snapshot() -> None:
        if len(records) < most:
            records.append({**parameters_of(case.model), "calls": recorder.take()})

    recorder = CallRecorder(case, on_step=snapshot)
    batches = [(x.clone(), y.clone()) for x, y in case.inputs]
    returned = function(case.model, case.optimizer, case.loss_fn, batches, int(spec["epochs"]))
    losses, losses_type = None, type_name(returned)
    if isinstance(returned, list | tuple):
        losses = [number_of(v) for v in returned[:most]]
        # A list of loss tensors holds numbers too: the type says what they were.
        odd = [type_name(v) for v in returned[:most] if not isinstance(v, float)]
        if odd:
            losses_type = f"{losses_type} of {odd[0]}"[:MAX_TYPE_NAME_CHARS]
    return {
        **parameters_of(case.model),
        "calls": recorder.take(),
        "losses": losses,
        "losses_type": losses_type,
    }


RECORDERS['training-loop'] = record_loop


def record_pair(function: Callable[..., Any], spec: dict[str, Any], records: list[Record]) -> None:
    """One call; the two gradients of the first parameter (the first layer's weight) it
    returns, before and after the harness zeroes `.grad` in
    place: a returned tensor that is the live `.grad` changes, a copy does not. (Run in the
    sandbox too: harness names only.)
    """
    case = build_case(spec)
    recorder = CallRecorder(case)
    x, y = case.inputs[0]
    returned = function(case.model, case.loss_fn, x.clone(), y.clone())
    pair = returned if isinstance(returned, tuple) and len(returned) == 2 else (None, None)
    record = {
        **parameters_of(case.model),
        "result_type": type_name(returned),
        "first": values_of(pair[0]),
        "second": values_of(pair[1]),
        "calls": recorder.take(),
    }
    for parameter in case.model.parameters():
        if parameter.grad is not None:
            parameter.grad.zero_()
    record["first_after_clearing"] = values_of(pair[0])
    record["second_after_clearing"] = values_of(pair[1])
    records.append(record)


RECORDERS['gradient-pair'] = record_pair


def prepare_gradients(case: Case, state: str) -> nn.Module:
    """Run one backward pass, then leave `.grad` as the state says: present, released (none),
    filled with zeros, or mixed (the weights' present, the biases' released)."""
    model = case.model
    x, y = case.inputs[0]
    case.loss_fn(model(x), y).backward()
    if state == "none":
        case.optimizer.zero_grad()
    elif state == "zeros":
        case.optimizer.zero_grad(set_to_none=False)
    elif state == "mixed":
        for name, parameter in model.named_parameters():
            if name.split(".")[-1] == "bias":
                parameter.grad = None
    return model


def record_reading(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> None:
    """One call on a model whose `.grad` is in the state the case names (run in the sandbox
    too: harness names and prepare_gradients only)."""
    case = build_case(spec)
    model = prepare_gradients(case, spec.get("grad_state", "present"))
    returned = function(model)
    records.append(
        {**parameters_of(model), "value": number_of(returned), "value_type": type_name(returned)}
    )


RECORDERS['gradient-reading'] = record_reading


def most_epoch_records(spec: dict[str, Any]) -> int:
    """The most optimizer steps a case records: four times a right loop's, bounded whatever
    the learner's loop does."""
    return 4 * int(spec["epochs"]) * int(spec["steps"])


def record_epochs(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """One call that trains for several epochs with a StepLR scheduler; at every optimizer step
    its learning rate and the scheduler steps before it, then the weights (run in the sandbox
    too: harness names and most_epoch_records only)."""
    case = build_case(spec)
    optimizer = case.optimizer
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=int(spec["lr_step_size"]), gamma=float(spec["lr_gamma"])
    )
    most = most_epoch_records(spec)
    seen = {"scheduler_steps": 0, "before": 0, "lr": 0.0}
    scheduler_step = scheduler.step

    def counted_step(*args: Any, **kwargs: Any) -> Any:
        seen["scheduler_steps"] += 1
        return scheduler_step(*args, **kwargs)

    # Per instance, as CallRecorder does: torch itself is never patched.
    scheduler.step = counted_step  # type: ignore[method-assign]

    def before_step(*_: Any) -> None:
        seen["lr"] = float(optimizer.param_groups[0]["lr"])
        seen["before"] = seen["scheduler_steps"]

    def after_step() -> None:
        if len(records) < most:
            records.append(
                {
                    "parameters": flat_parameters(case.model),
                    "lr": seen["lr"],
                    "scheduler_steps": float(seen["before"]),
                    "calls": recorder.take(),
                }
            )

    optimizer.register_step_pre_hook(before_step)
    recorder = CallRecorder(case, on_step=after_step)
    batches = [(x.clone(), y.clone()) for x, y in case.inputs]
    returned = function(
        case.model, optimizer, scheduler, case.loss_fn, batches, int(spec["epochs"])
    )
    losses = [number_of(v) for v in returned[:most]] if isinstance(returned, list | tuple) else None
    return {
        "parameters": flat_parameters(case.model),
        "losses": losses,
        "losses_type": type_name(returned),
        "scheduler_steps": float(seen["scheduler_steps"]),
        "calls": recorder.take(),
    }


RECORDERS['epoch-loop'] = record_epochs


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


RECORDERS['evaluation'] = record_evaluation


def train_on(case: Case, model: Any, optimizer: Any, batches: list[Any]) -> None:
    """The trusted loop: zero, backward, step on each batch (run in the sandbox too)."""
    for x, y in batches:
        optimizer.zero_grad()
        case.loss_fn(model(x), y).backward()
        optimizer.step()


def resumed_state(model: Any, optimizer: Any) -> Record:
    """Every parameter, flattened, and the optimizer's state for the first layer's weight (run
    in the sandbox too)."""
    return {
        "parameters": flat_parameters(model),
        **optimizer_state(optimizer, first_parameter(model)),
    }


def saved_checkpoint(
    save: Callable[..., Any], spec: dict[str, Any]
) -> tuple[bytes, list[Any], str]:
    """Train the case's model, call `save`, and write what it returned as bytes with
    `torch.save`; then change the saved model and optimizer in place and let them go. The
    bytes, the batches still to train on and the returned value's type are all that leaves this
    frame: a `resume` that copies from the live objects (kept in a global, or found in a frame)
    copies zeros (run in the sandbox too: harness names and train_on only)."""
    import io

    steps = int(spec["steps"])
    case = build_case({**spec, "steps": 2 * steps})
    train_on(case, case.model, case.optimizer, case.inputs[:steps])
    state = save(case.model, case.optimizer)
    written = io.BytesIO()
    try:
        torch.save(state, written)
    except Exception as exc:
        raise TypeError(
            "torch.save could not write what save(model, optimizer) returned: return a dict of "
            "state dicts, tensors and numbers"
        ) from exc
    with torch.no_grad():
        for parameter in case.model.parameters():
            parameter.zero_()
    for kept in case.optimizer.state.values():
        for value in kept.values():
            if isinstance(value, torch.Tensor):
                value.zero_()
    case.optimizer.state.clear()
    return written.getvalue(), case.inputs[steps:], type_name(state)


def record_checkpoint(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """Train, save as bytes, then twice: resume a fresh pair from those bytes (read with
    `torch.load(weights_only=True)`), train it on (run in the sandbox too: harness names,
    saved_checkpoint, train_on and resumed_state only)."""
    import io

    save = getattr(function, "__globals__", {}).get("save")
    if not callable(save):
        raise NameError("name 'save' is not defined: write save(model, optimizer) beside resume")
    checkpoint, batches, state_type = saved_checkpoint(save, spec)
    for _ in range(2):
        # A second pair from the same bytes must agree: `resume` reads the checkpoint it is
        # given, nothing left over from the first.
        fresh = build_case({**spec, "steps": 0, "seed": int(spec["seed"]) + 1})
        try:
            state = torch.load(io.BytesIO(checkpoint), weights_only=True)
        except Exception as exc:
            raise TypeError(
                "torch.load(..., weights_only=True) could not read back what save(model, "
                "optimizer) returned: return a dict of state dicts, tensors and numbers"
            ) from exc
        function(fresh.model, fresh.optimizer, state)
        records.append(resumed_state(fresh.model, fresh.optimizer))
        for batch in batches:
            train_on(fresh, fresh.model, fresh.optimizer, [batch])
            records.append(resumed_state(fresh.model, fresh.optimizer))
    return {"state_type": state_type}


RECORDERS['checkpoint'] = record_checkpoint


def gradients_for_call(case: Case, call: int) -> None:
    """This call's gradients in `.grad`: the batch's backward pass, the bias's released on every
    second call (run in the sandbox too: harness names only)."""
    model = case.model
    model.weight.grad = None
    model.bias.grad = None
    x, y = case.inputs[call]
    case.loss_fn(model(x), y).backward()
    if call % 2 == 1:
        model.bias.grad = None


def record_hand_steps(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> None:
    """Call the function once per batch on the weight, the bias and their velocities (run in the
    sandbox too: harness names and gradients_for_call only)."""
    case = build_case(spec)
    model = case.model
    assert isinstance(model, nn.Linear)  # the kind reads no `model` setting
    velocities = [torch.zeros_like(model.weight), torch.zeros_like(model.bias)]
    lr = float(spec["lr"])
    momentum = float(spec.get("momentum") or 0.0)
    weight_decay = float(spec.get("weight_decay") or 0.0)
    for call in range(int(spec["steps"])):
        gradients_for_call(case, call)
        function([model.weight, model.bias], list(velocities), lr, momentum, weight_decay)
        records.append(
            {
                **parameters_of(model),
                "weight_velocity": values_of(velocities[0]),
                "bias_velocity": values_of(velocities[1]),
            }
        )


RECORDERS['optimizer-by-hand'] = record_hand_steps


def build_epoch_case(
    spec: dict[str, Any],
) -> tuple[nn.Sequential, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The case's MLP in evaluation mode, its optimizer, and the dataset's batches in the
    loader's order, all drawn from the case's generator (run in the sandbox too: harness names
    only)."""
    generator = torch.Generator().manual_seed(int(spec["seed"]))
    model = build_mlp(spec, generator)
    examples = int(spec.get("examples") or 0) or int(spec["steps"]) * int(spec["batch_size"])
    x = torch.randn(examples, int(spec["in_features"]), generator=generator)
    y = torch.randn(examples, int(spec["out_features"]), generator=generator)
    size = int(spec["batch_size"])
    batches = [(x[i : i + size], y[i : i + size]) for i in range(0, examples, size)]
    optimizer = build_optimizer(list(model.parameters()), spec)
    model.eval()
    return model, optimizer, batches


def record_epoch(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> Record:
    """One call over a DataLoader of the case's batches (run in the sandbox too: harness names
    and build_epoch_case only)."""
    model, optimizer, batches = build_epoch_case(spec)
    x = torch.cat([bx for bx, _ in batches])
    y = torch.cat([by for _, by in batches])
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=int(spec["batch_size"]), shuffle=False)
    seen = {"forwards": 0.0, "train_forwards": 0.0}

    def watch(module: Any, inputs: Any) -> None:
        seen["forwards"] += 1
        if all(m.training for m in model.modules()):
            seen["train_forwards"] += 1

    model[0].register_forward_pre_hook(watch)
    most = 4 * len(batches)

    def stepped(*_: Any) -> None:
        if len(records) < most:
            records.append({"parameters": flat_parameters(model)})

    optimizer.register_step_post_hook(stepped)
    returned = function(model, optimizer, nn.MSELoss(), loader)
    return {
        "parameters": flat_parameters(model),
        "value": number_of(returned),
        "value_type": type_name(returned),
        "training_after": float(all(m.training for m in model.modules())),
        **seen,
    }


RECORDERS['dataloader-epoch'] = record_epoch


def build_fit_case(
    spec: dict[str, Any],
) -> tuple[
    nn.Sequential, list[tuple[torch.Tensor, torch.Tensor]], list[tuple[torch.Tensor, torch.Tensor]]
]:
    """The case's MLP in training mode, its training batches and its validation batches, all
    drawn from the case's generator (run in the sandbox too: harness names only)."""
    generator = torch.Generator().manual_seed(int(spec["seed"]))
    model = build_mlp(spec, generator)
    in_features, out_features = int(spec["in_features"]), int(spec["out_features"])
    size = int(spec["batch_size"])
    true_weight = torch.randn(out_features, in_features, generator=generator)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, in_features, generator=generator)
        noise = torch.randn(size, out_features, generator=generator)
        return x, 0.3 * x @ true_weight.T + noise

    train = [batch() for _ in range(int(spec["steps"]))]
    validation = [batch() for _ in range(2)]
    model.train()
    return model, train, validation


def record_fit(function: Callable[..., Any], spec: dict[str, Any], records: list[Record]) -> Record:
    """One call of the fit; every parameter after each optimizer step, and at the end (run in
    the sandbox too: harness names and build_fit_case only)."""
    model, train, validation = build_fit_case(spec)
    optimizer = build_optimizer(list(model.parameters()), spec)
    most = 4 * int(spec["epochs"]) * int(spec["steps"])

    def stepped(*_: Any) -> None:
        if len(records) < most:
            records.append({"parameters": flat_parameters(model)})

    optimizer.register_step_post_hook(stepped)
    returned = function(
        model,
        optimizer,
        nn.MSELoss(),
        [(x.clone(), y.clone()) for x, y in train],
        [(x.clone(), y.clone()) for x, y in validation],
        int(spec["epochs"]),
        int(spec.get("patience", 1)),  # CaseSpec.patience's default: sent only when set
    )
    losses, losses_type = None, type_name(returned)
    if isinstance(returned, list | tuple):
        losses = [number_of(v) for v in returned[: int(spec["epochs"]) + 1]]
        odd = [type_name(v) for v in returned if not isinstance(v, float)]
        if odd:
            losses_type = f"{losses_type} of {odd[0]}"[:MAX_TYPE_NAME_CHARS]
    return {
        "parameters": flat_parameters(model),
        "losses": losses,
        "losses_type": losses_type,
        "training_after": float(all(m.training for m in model.modules())),
    }


RECORDERS['patience-fit'] = record_fit


def make_scaler(spec: dict[str, Any]) -> torch.amp.GradScaler:
    """The case's scaler: its `loss_scale` at first (1024, CaseSpec's default, when the case
    sets none), doubled by every `update()` after a step without an overflow, halved after one
    (run in the sandbox too: harness names only)."""
    scale = float(spec.get("loss_scale", 1024.0))
    return torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=1)


def record_amp_steps(
    function: Callable[..., Any], spec: dict[str, Any], records: list[Record]
) -> None:
    """Call the function once per batch on one scaler (run in the sandbox too: harness names
    and make_scaler only)."""
    case = build_case(spec)
    scaler = make_scaler(spec)
    for x, y in case.inputs:
        returned = function(
            case.model,
            case.optimizer,
            scaler,
            case.loss_fn,
            x.clone(),
            y.clone(),
            float(spec["max_norm"]),
        )
        weights = parameters_of(case.model)
        loss = number_of(returned)
        records.append(
            {
                "weight": weights["weight"],
                "bias": weights["bias"],
                # A scale near float32's largest is past the trace's bound: its power of two.
                "scale_log2": math.log2(scaler.get_scale()),
                # A loss times such a scale is an infinity: no finite number, said as such.
                "loss": loss if loss is not None and abs(loss) <= 1e15 else None,
                "loss_type": type_name(returned),
            }
        )


RECORDERS['mixed-precision-step'] = record_amp_steps


if __name__ == "__main__":
    main()
