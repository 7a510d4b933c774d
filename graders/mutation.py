"""Soundness by mutation: small edits of a reference solution, each of which the grader must catch.

Each mutant is the reference with one edit made on its syntax tree (`ast`): a statement deleted,
two neighbouring statements swapped, `set_to_none` changed, the `return` moved up, a call made
twice, a `.clone()` dropped. A mutant that changes what the harness observes (any recorded
value in any case) must lose points; one that changes nothing observable is equivalent and
proves nothing. The mutants are our own trusted code, so they run in this process, through the
same tracing and judging as every learner.
"""

from __future__ import annotations

import ast
import copy
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from graders.exercise import Exercise
from graders.syntax import parse_module


class Edit(enum.Enum):
    """The kinds of edit made to a reference solution."""

    DELETE = "delete a statement"
    SWAP = "swap two statements"
    SET_TO_NONE = "change set_to_none"
    MOVE_RETURN = "move the return"
    DUPLICATE_CALL = "duplicate a call"
    DROP_CLONE = "drop a .clone()"
    PATTERN = "write it as learners do"


@dataclass(frozen=True)
class Mutant:
    """One edit of the reference: what was done, where, and the edited source."""

    edit: Edit
    where: str
    source: str
    # A pattern that is still a right answer (the same values, made another way): it must score
    # full marks, and what it is told must be true of it.
    right: bool = False

    def describe(self) -> str:
        return f"{self.edit.value}: {self.where}"


def _blocks(tree: ast.AST) -> Iterator[tuple[list[ast.stmt], int]]:
    """Every list of statements inside a function (its body, loop bodies, branches), in order,
    with the index of its first statement that is code (a docstring is not)."""
    seen: set[int] = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if (
                    isinstance(block, list)
                    and block
                    and isinstance(block[0], ast.stmt)
                    and id(block) not in seen
                ):
                    seen.add(id(block))
                    yield block, int(_is_docstring(block[0]))


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _text(node: ast.AST) -> str:
    return f"line {getattr(node, 'lineno', '?')} `{ast.unparse(node).splitlines()[0]}`"


def _method_calls(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    """Every call of a method with this name (`optimizer.zero_grad()`, `grad.clone()`)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == name
        ):
            yield node


# An editor edits the n-th site of its kind in a fresh copy of the tree and says where; it
# returns None once there is no n-th site.
Editor = Callable[[ast.Module, int], str | None]


def _delete(tree: ast.Module, n: int) -> str | None:
    sites = [(block, i) for block, first in _blocks(tree) for i in range(first, len(block))]
    if n >= len(sites):
        return None
    block, i = sites[n]
    where = _text(block[i])
    del block[i]
    if all(map(_is_docstring, block)):
        block.append(ast.Pass())
    return where


def _swap(tree: ast.Module, n: int) -> str | None:
    sites = [(block, i) for block, first in _blocks(tree) for i in range(first, len(block) - 1)]
    if n >= len(sites):
        return None
    block, i = sites[n]
    where = f"{_text(block[i])} and {_text(block[i + 1])}"
    block[i], block[i + 1] = block[i + 1], block[i]
    return where


def _set_to_none(tree: ast.Module, n: int) -> str | None:
    calls = list(_method_calls(tree, "zero_grad"))
    if n >= len(calls):
        return None
    call = calls[n]
    where = _text(call)
    given = next((k for k in call.keywords if k.arg == "set_to_none"), None)
    if given is None:
        call.keywords.append(ast.keyword("set_to_none", ast.Constant(False)))
    else:
        was = isinstance(given.value, ast.Constant) and given.value.value is True
        given.value = ast.Constant(not was)
    return where


def _move_return(tree: ast.Module, n: int) -> str | None:
    sites = [
        (block, i, to)
        for block, first in _blocks(tree)
        for i, statement in enumerate(block)
        if isinstance(statement, ast.Return)
        for to in range(first, i)
    ]
    if n >= len(sites):
        return None
    block, i, to = sites[n]
    where = f"{_text(block[i])} up before {_text(block[to])}"
    block.insert(to, block.pop(i))
    return where


def _duplicate_call(tree: ast.Module, n: int) -> str | None:
    sites = [
        (block, i)
        for block, _ in _blocks(tree)
        for i, statement in enumerate(block)
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
    ]
    if n >= len(sites):
        return None
    block, i = sites[n]
    block.insert(i + 1, copy.deepcopy(block[i]))
    return _text(block[i])


class _DropClone(ast.NodeTransformer):
    def __init__(self, target: ast.Call) -> None:
        self.target = target

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if node is self.target and isinstance(node.func, ast.Attribute):
            return node.func.value
        return node


def _drop_clone(tree: ast.Module, n: int) -> str | None:
    calls = [c for c in _method_calls(tree, "clone") if not c.args]
    if n >= len(calls):
        return None
    where = _text(calls[n])
    _DropClone(calls[n]).visit(tree)
    return where


EDITORS: dict[Edit, Editor] = {
    Edit.DELETE: _delete,
    Edit.SWAP: _swap,
    Edit.SET_TO_NONE: _set_to_none,
    Edit.MOVE_RETURN: _move_return,
    Edit.DUPLICATE_CALL: _duplicate_call,
    Edit.DROP_CLONE: _drop_clone,
}


def mutants(source: str) -> list[Mutant]:
    """Every single-edit mutant of a source file, each different from it and from the others."""
    original = parse_module(source)
    seen = {ast.unparse(original)}
    found = []
    for edit, editor in EDITORS.items():
        n = 0
        while True:
            tree = copy.deepcopy(original)
            where = editor(tree, n)
            if where is None:
                break
            n += 1
            mutated = ast.unparse(ast.fix_missing_locations(tree))
            if mutated not in seen:
                seen.add(mutated)
                found.append(Mutant(edit, where, mutated + "\n"))
    return found


def reference_mutants(exercise: Exercise) -> list[Mutant]:
    return mutants(exercise.solution_code) + patterns(exercise)


@dataclass(frozen=True)
class Pattern:
    """A way learners really write a line of a reference (from bug reports and forum threads):
    `line`, a statement of the reference, becomes `written` (indented as it was). `right`: the
    same values made another way; else a mistake. `optimizer`: only for cases of this one."""

    name: str
    line: str
    written: str
    right: bool
    optimizer: str = ""


PATTERNS = (
    Pattern(
        "gradients from torch.autograd.grad, put in .grad by hand",
        "loss.backward()",
        "import torch\n"
        "grads = torch.autograd.grad(loss, list(model.parameters()))\n"
        "for p, g in zip(model.parameters(), grads):\n"
        "    p.grad = g if p.grad is None else p.grad + g",
        right=True,
    ),
    Pattern(
        "clip_grad_norm_ given a parameter generator already used up",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
        "params = model.parameters()\n"
        "count = sum(1 for _ in params)\n"
        "torch.nn.utils.clip_grad_norm_(params, max_norm)",
        right=False,
    ),
    Pattern(
        "the gradients clipped with a norm computed by hand",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
        "total = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))\n"
        "scale = min(1.0, max_norm / (float(total) + 1e-06))\n"
        "for p in model.parameters():\n"
        "    p.grad.mul_(scale)",
        right=True,
    ),
    Pattern(
        "Adam's update written by hand",
        "optimizer.step()",
        "import torch\n"
        "with torch.no_grad():\n"
        "    for group in optimizer.param_groups:\n"
        "        beta1, beta2 = group['betas']\n"
        "        for p in group['params']:\n"
        "            state = optimizer.state[p]\n"
        "            if not state:\n"
        "                state['step'] = torch.tensor(0.0)\n"
        "                state['exp_avg'] = torch.zeros_like(p)\n"
        "                state['exp_avg_sq'] = torch.zeros_like(p)\n"
        "            state['step'] += 1\n"
        "            t = float(state['step'])\n"
        "            g = p.grad + group['weight_decay'] * p\n"
        "            state['exp_avg'].mul_(beta1).add_(g, alpha=1 - beta1)\n"
        "            state['exp_avg_sq'].mul_(beta2).addcmul_(g, g, value=1 - beta2)\n"
        "            denom = (state['exp_avg_sq'] / (1 - beta2 ** t)).sqrt().add_(group['eps'])\n"
        "            p.addcdiv_(state['exp_avg'], denom, value=-group['lr'] / (1 - beta1 ** t))",
        right=True,
        optimizer="adam",
    ),
    Pattern(
        "the learner's own LambdaLR in place of the scheduler given",
        "scheduler.step()",
        "import torch\n"
        "if epoch == 0:\n"
        "    own = torch.optim.lr_scheduler.LambdaLR(\n"
        "        optimizer, lambda e: scheduler.gamma ** (e // scheduler.step_size)\n"
        "    )\n"
        "own.step()",
        right=True,
    ),
    Pattern(
        "the model's parameters replaced on resume, not loaded into",
        'model.load_state_dict(state["model"])',
        "import torch\n"
        'for name, value in state["model"].items():\n'
        "    setattr(model, name, torch.nn.Parameter(value.clone()))",
        right=False,
    ),
)


def patterns(exercise: Exercise) -> list[Mutant]:
    """The reference with each pattern that fits one of its lines written in."""
    lines = exercise.solution_code.split("\n")
    found = []
    for pattern in PATTERNS:
        if pattern.optimizer and any(c.optimizer != pattern.optimizer for c in exercise.cases):
            continue
        for number, line in enumerate(lines):
            if line.strip() != pattern.line:
                continue
            indent = line[: len(line) - len(line.lstrip())]
            written = [indent + part for part in pattern.written.split("\n")]
            source = "\n".join([*lines[:number], *written, *lines[number + 1 :]])
            found.append(Mutant(Edit.PATTERN, pattern.name, source, pattern.right))
    return found
