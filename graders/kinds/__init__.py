"""The exercise kinds, one module each, registered here; an exercise names its kind in
`exercise.toml`.

Registering checks each declaration whole, at import (so at start-up): a missing piece, a
recorder the sandbox could not run, or two kinds of one name stop the server with the reason.
Adding a kind is its module, one line in `_DECLARED`, its docs and its tests.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from graders import harness
from graders.exercise import Exercise
from graders.kind import ExerciseKind
from graders.kinds import (
    checkpoint,
    dataloader_epoch,
    epoch_loop,
    evaluation,
    gradient_pair,
    gradient_reading,
    mixed_precision_step,
    optimizer_by_hand,
    patience_fit,
    step_function,
    training_loop,
)


class KindDeclarationError(RuntimeError):
    """A kind's declaration is incomplete or its recorder cannot run in the sandbox."""


def _shipped_source(kind: ExerciseKind, function: Callable[..., Any]) -> str:
    """The source of a function that runs in the sandbox after graders/harness.py, checked to
    need nothing there but the harness, the kind's other shipped functions and builtins."""
    where = f"kind {kind.name!r}: {getattr(function, '__qualname__', function)!r}"
    if not inspect.isfunction(function) or function.__qualname__ != function.__name__:
        raise KindDeclarationError(f"{where} is not a module-level function")
    if hasattr(harness, function.__name__):
        raise KindDeclarationError(f"{where} would replace the harness's own {function.__name__}")
    shipped = {f.__name__ for f in (kind.record, *kind.sandbox_helpers)}
    module_globals = function.__globals__
    for name in _global_names(function.__code__):
        if name in shipped or hasattr(builtins, name) or name not in module_globals:
            continue  # the kind's own, a builtin, or an attribute's name
        if getattr(harness, name, None) is not module_globals[name]:
            raise KindDeclarationError(
                f"{where} uses {name!r}, which the sandbox does not have: take it from "
                "graders.harness, or add the function to sandbox_helpers"
            )
    return inspect.getsource(function)


def _global_names(code: Any) -> set[str]:
    """Every name a function's code (nested functions' too) may look up globally."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if inspect.iscode(constant):
            names |= _global_names(constant)
    return names


def _checked(kinds: Iterable[ExerciseKind]) -> dict[str, ExerciseKind]:
    registered: dict[str, ExerciseKind] = {}
    for kind in kinds:
        if kind.name in registered:
            raise KindDeclarationError(f"two kinds are named {kind.name!r}")
        if not (kind.name and kind.summary and kind.judge.checks and "runs" in kind.judge.checks):
            raise KindDeclarationError(
                f"kind {kind.name!r}: a name, a summary and checks (with `runs`) are required"
            )
        for piece in (kind.record, kind.judge.judge_case, kind.judge.plots, kind.models):
            if not callable(piece):
                raise KindDeclarationError(f"kind {kind.name!r}: {piece!r} is not callable")
        registered[kind.name] = kind
    return registered


_DECLARED = (
    step_function.KIND,
    training_loop.KIND,
    gradient_pair.KIND,
    gradient_reading.KIND,
    epoch_loop.KIND,
    evaluation.KIND,
    checkpoint.KIND,
    optimizer_by_hand.KIND,
    dataloader_epoch.KIND,
    patience_fit.KIND,
    mixed_precision_step.KIND,
)
KINDS: dict[str, ExerciseKind] = _checked(_DECLARED)


def _sandbox_program(kinds: Iterable[ExerciseKind]) -> str:
    """graders/harness.py, then every kind's recorder registered in `RECORDERS`, then the call
    of `main()`: one program for every kind, so a warm pool serves them all."""
    parts = [Path(harness.__file__).read_text()]
    defined: dict[str, str] = {}
    for kind in kinds:
        for function in (*kind.sandbox_helpers, kind.record):
            other = defined.setdefault(function.__name__, kind.name)
            if other != kind.name:
                raise KindDeclarationError(
                    f"kinds {other!r} and {kind.name!r} both ship a {function.__name__!r} into "
                    "the sandbox: rename one"
                )
        for helper in kind.sandbox_helpers:
            parts.append(_shipped_source(kind, helper))
        parts.append(_shipped_source(kind, kind.record))
        parts.append(f"RECORDERS[{kind.name!r}] = {kind.record.__name__}\n")
    parts.append('if __name__ == "__main__":\n    main()\n')
    program = "\n\n".join(parts)
    compile(program, "harness.py", "exec")  # a recorder's syntax fails here, not in a run
    return program


SANDBOX_PROGRAM = _sandbox_program(KINDS.values())


def kind_of(exercise: Exercise) -> ExerciseKind:
    """The kind of an exercise (that loaded: an unknown kind was refused then)."""
    return KINDS[exercise.kind]


def owner(code: str) -> str:
    """The kind whose module declares the diagnosis `code`, "" for a code every kind may give."""
    return next((k.name for k in KINDS.values() if any(d.code == code for d in k.diagnoses)), "")
