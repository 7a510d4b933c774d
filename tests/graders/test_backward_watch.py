"""The backward watch (graders.harness: `BackwardWatch`, `_install_watch`): what it marks, that
a case sees only its own thread's calls, that the learner's traceback shows none of it, and that
the harness run again in one process (as in a warm pool's job) watches through the wrappers
already installed."""

from __future__ import annotations

import threading
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from graders import harness
from graders.exercises import get_exercise
from graders.kinds import SANDBOX_PROGRAM, kind_of

WAIT_SECONDS = 60.0  # only a broken test waits this long


def _run_train_step(function: Any, program: Any = harness) -> dict[str, Any]:
    """train-step's first case run watched, by the harness module or a program's namespace."""
    exercise = get_exercise("train-step")
    recorder = program.RECORDERS.get(exercise.kind, kind_of(exercise).record)
    return program.run_case(recorder, function, exercise.cases[0].harness_spec())  # type: ignore[no-any-return]


def _step(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> float:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss.item())


def _detached_by_tensor_backward(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> None:
    loss_fn(model(x), y).detach().requires_grad_().backward()


def _detached_by_autograd_backward(
    model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any
) -> None:
    torch.autograd.backward(loss_fn(model(x), y).detach().requires_grad_())


def _optimizer_made(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> Any:
    return torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])


@pytest.mark.parametrize(
    ("mistake", "mark"),
    [
        (_detached_by_tensor_backward, "detached_backward"),
        (_detached_by_autograd_backward, "detached_backward"),
        (_optimizer_made, "new_optimizer"),
    ],
)
def test_a_mistake_the_watch_sees_is_marked_once(mistake: Any, mark: str) -> None:
    """Tensor.backward calls torch.autograd.backward: one backward, one mark. An optimizer made
    of the weight is marked and its own calls recorded."""

    def train_step(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> float:
        made = mistake(model, optimizer, loss_fn, x, y)
        return _step(model, made or optimizer, loss_fn, x, y)

    document = _run_train_step(train_step)
    assert document["error"] is None
    assert document["records"]
    for record in document["records"]:
        assert record["calls"] == [mark, "zero_grad", "backward", "step"]


def test_an_unwatched_case_marks_nothing() -> None:
    def train_step(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> float:
        loss_fn(model(x), y).detach().requires_grad_().backward()
        own = torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])
        return _step(model, own, loss_fn, x, y)

    exercise = get_exercise("train-step")
    spec = exercise.cases[0].harness_spec()
    document = harness.run_case(kind_of(exercise).record, train_step, spec, watched=False)
    assert document["error"] is None
    for record in document["records"]:
        assert record["calls"] == ["backward"]  # the made optimizer's calls are not recorded


def test_cases_running_at_once_in_two_threads_each_see_only_their_own_calls() -> None:
    """A makes a detached backward while B's case runs; B then steps while A's case runs. Each
    record holds only its own thread's calls."""
    both_inside = threading.Barrier(2, timeout=WAIT_SECONDS)
    a_detached, b_stepped = threading.Event(), threading.Event()

    def a_step(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> float:
        if not a_detached.is_set():
            both_inside.wait()
            loss_fn(model(x), y).detach().requires_grad_().backward()
            a_detached.set()
            assert b_stepped.wait(WAIT_SECONDS)
        return _step(model, optimizer, loss_fn, x, y)

    def b_step(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> float:
        if not b_stepped.is_set():
            both_inside.wait()
            assert a_detached.wait(WAIT_SECONDS)
            loss = _step(model, optimizer, loss_fn, x, y)
            b_stepped.set()
            return loss
        return _step(model, optimizer, loss_fn, x, y)

    documents: dict[str, dict[str, Any]] = {}

    def run(name: str, function: Any) -> None:
        documents[name] = _run_train_step(function)

    threads = [threading.Thread(target=run, args=item) for item in (("a", a_step), ("b", b_step))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS)
    assert a_detached.is_set() and b_stepped.is_set()
    a_calls = [record["calls"] for record in documents["a"]["records"]]
    b_calls = [record["calls"] for record in documents["b"]["records"]]
    assert documents["a"]["error"] is None and documents["b"]["error"] is None
    plain = ["zero_grad", "backward", "step"]
    assert a_calls[0] == ["detached_backward", *plain]
    assert a_calls[1:] == [plain] * (len(a_calls) - 1)
    assert b_calls == [plain] * len(b_calls)


def test_an_error_inside_backward_has_a_traceback_without_the_harness() -> None:
    source = (
        "def train_step(model, optimizer, loss_fn, x, y):\n"
        "    loss = loss_fn(model(x), y)\n"
        "    loss.backward()\n"
        "    loss.backward()\n"
    )
    function = harness.load_function(source, "train_step", harness.SUBMISSION_FILENAME)
    error = _run_train_step(function)["error"]
    assert error is not None and error["type"] == "RuntimeError"
    files = [
        line.split('"')[1]
        for line in error["traceback"].splitlines()
        if line.startswith('  File "')
    ]
    torch_dir = str(Path(torch.__file__).parent)
    assert files[0] == harness.SUBMISSION_FILENAME
    assert len(files) > 1
    assert all(file.startswith(torch_dir) for file in files[1:]), files
    assert "watched_backward" not in error["traceback"]


def test_the_harness_run_again_in_one_process_watches_through_the_installed_wrappers() -> None:
    """A warm pool's job runs the program its zygote ran already: the wrappers stay one layer,
    and the job's cases are still told."""
    backward, add_param_group = torch.autograd.backward, torch.optim.Optimizer.add_param_group
    program = types.ModuleType("again")
    exec(compile(SANDBOX_PROGRAM, "main.py", "exec"), program.__dict__)
    assert program.RECORDERS["step-function"] is not kind_of(get_exercise("train-step")).record
    assert torch.autograd.backward is backward
    assert torch.optim.Optimizer.add_param_group is add_param_group

    def train_step(model: Any, optimizer: Any, loss_fn: Any, x: Any, y: Any) -> float:
        loss_fn(model(x), y).detach().requires_grad_().backward()
        return _step(model, optimizer, loss_fn, x, y)

    document = _run_train_step(train_step, program)
    assert document["error"] is None
    for record in document["records"]:
        assert record["calls"] == ["detached_backward", "zero_grad", "backward", "step"]
