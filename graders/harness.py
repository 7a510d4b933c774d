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
