"""Every exercise, each proven sound, each accepting the usual correct styles.

Correct styles and known bugs are judged in this process (`judge_source`: the same tracing,
parsing and judging as grade(), without the sandbox's cold start); a few go through the real
sandbox end to end for every exercise.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import sandbox
from graders import grade
from graders.exercise import MAX_CASE_ID_CHARS, MAX_CASES, CaseSpec, Exercise
from graders.exercises import list_exercises, load_exercise
from graders.mutation import Edit, reference_mutants
from graders.proving import judge_source, prove, proven_problems
from sandbox.supervise import LATER_INPUT_MAX_BYTES

EXERCISES_DIR = Path(__file__).resolve().parents[2] / "exercises"


def code(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


CORRECT_STYLES: dict[str, dict[str, str]] = {
    "prove-accumulation": {
        "multiply by one": """
            def accumulation_demo(model, loss_fn, x, y):
                loss_fn(model(x), y).backward()
                first = model.weight.grad * 1.0
                loss_fn(model(x), y).backward()
                return first, model.weight.grad * 1.0
        """,
        "detach and clone": """
            def accumulation_demo(model, loss_fn, x, y):
                loss_fn(model(x), y).backward()
                first = model.weight.grad.detach().clone()
                loss_fn(model(x), y).backward()
                second = model.weight.grad.detach().clone()
                return (first, second)
        """,
        "one graph, retain_graph": """
            def accumulation_demo(model, loss_fn, x, y):
                loss = loss_fn(model(x), y)
                loss.backward(retain_graph=True)
                first = model.weight.grad.clone()
                loss.backward()
                return first, model.weight.grad.clone()
        """,
        "torch.clone and autograd.backward": """
            import torch

            def accumulation_demo(model, loss_fn, x, y):
                torch.autograd.backward(loss_fn(model(x), y))
                first = torch.clone(model.weight.grad)
                torch.autograd.backward(loss_fn(model(x), y))
                return first, torch.clone(model.weight.grad)
        """,
        "deepcopy": """
            import copy

            def accumulation_demo(model, loss_fn, x, y):
                for _ in range(2):
                    loss_fn(model(x), y).backward()
                    if _ == 0:
                        first = copy.deepcopy(model.weight.grad)
                second = copy.deepcopy(model.weight.grad)
                return first, second
        """,
    },
    "grad-magnitude": {
        "math.fsum over entries": """
            import math

            def total_grad_magnitude(model):
                return math.fsum(
                    abs(v)
                    for p in model.parameters()
                    if p.grad is not None
                    for v in p.grad.flatten().tolist()
                )
        """,
        "generator": """
            def total_grad_magnitude(model):
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                return float(sum(g.abs().sum() for g in grads))
        """,
        "L1 norm": """
            import torch

            def total_grad_magnitude(model):
                total = 0.0
                for _, p in model.named_parameters():
                    if p.grad is None:
                        continue
                    total += torch.linalg.vector_norm(p.grad, ord=1).item()
                return total
        """,
        "concatenate": """
            import torch

            def total_grad_magnitude(model):
                grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
                return torch.cat(grads).abs().sum().item() if grads else 0.0
        """,
        "getattr default": """
            def total_grad_magnitude(model):
                total = 0.0
                for p in model.parameters():
                    grad = getattr(p, "grad", None)
                    total += 0.0 if grad is None else float(grad.abs().sum())
                return total
        """,
    },
    "train-step": {
        "model.zero_grad": """
            def train_step(model, optimizer, loss_fn, x, y):
                model.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return float(loss)
        """,
        "set_to_none=False": """
            def train_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad(set_to_none=False)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.item()
        """,
        "grads set to None by hand": """
            def train_step(model, optimizer, loss_fn, x, y):
                for parameter in model.parameters():
                    parameter.grad = None
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.item()
        """,
        "forward before zero_grad": """
            def train_step(model, optimizer, loss_fn, x, y):
                loss = loss_fn(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                return loss.item()
        """,
        "autograd.backward and a hand-written MSE": """
            import torch

            def train_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad()
                loss = ((model(x) - y) ** 2).mean()
                torch.autograd.backward(loss)
                optimizer.step()
                return loss.item()
        """,
        "zeroes at the start and at the end": """
            def train_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                return loss.item()
        """,
    },
    "accumulate-microbatches": {
        "backward through torch.autograd, scaled by multiplication": """
            import torch

            def accumulated_step(model, optimizer, loss_fn, micro_batches):
                optimizer.zero_grad()
                weight = 1.0 / len(micro_batches)
                losses = []
                for x, y in micro_batches:
                    loss = loss_fn(model(x), y)
                    torch.autograd.backward(loss * weight)
                    losses.append(loss.item())
                optimizer.step()
                return sum(losses) * weight
        """,
        "zeros kept, a while loop": """
            def accumulated_step(model, optimizer, loss_fn, micro_batches):
                optimizer.zero_grad(set_to_none=False)
                total, i = 0.0, 0
                while i < len(micro_batches):
                    x, y = micro_batches[i]
                    loss = loss_fn(model(x), y) / len(micro_batches)
                    loss.backward()
                    total += loss.item()
                    i += 1
                optimizer.step()
                return total
        """,
        "divide the gradients afterwards": """
            import torch

            def accumulated_step(model, optimizer, loss_fn, micro_batches):
                model.zero_grad(set_to_none=False)
                total = 0.0
                for x, y in micro_batches:
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    total += loss.item()
                with torch.no_grad():
                    for p in model.parameters():
                        p.grad /= len(micro_batches)
                optimizer.step()
                return total / len(micro_batches)
        """,
        "grads to None by hand, enumerate": """
            def accumulated_step(model, optimizer, loss_fn, micro_batches):
                for p in model.parameters():
                    p.grad = None
                count = len(micro_batches)
                mean = 0.0
                for i, (x, y) in enumerate(micro_batches):
                    loss = loss_fn(model(x), y)
                    (loss / count).backward()
                    mean += loss.item() / count
                optimizer.step()
                return mean
        """,
        "one micro-batch at a time, graph freed each time": """
            def accumulated_step(model, optimizer, loss_fn, micro_batches):
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.zero_()
                mean = 0.0
                for x, y in micro_batches:
                    loss = loss_fn(model(x), y)
                    loss.div(len(micro_batches)).backward()
                    mean += loss.detach().item() / len(micro_batches)
                optimizer.step()
                return float(mean)
        """,
    },
    "fix-the-loop": {
        "grads to None by hand, a while loop": """
            def train(model, optimizer, loss_fn, batches, epochs):
                losses, epoch = [], 0
                while epoch < epochs:
                    for x, y in batches:
                        for p in model.parameters():
                            p.grad = None
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        optimizer.step()
                        losses.append(loss.item())
                    epoch += 1
                return losses
        """,
        "model.zero_grad": """
            def train(model, optimizer, loss_fn, batches, epochs):
                losses = []
                for _ in range(epochs):
                    for x, y in batches:
                        model.zero_grad()
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        optimizer.step()
                        losses.append(float(loss))
                return losses
        """,
        "set_to_none=False and forward first": """
            def train(model, optimizer, loss_fn, batches, epochs):
                losses = []
                for _ in range(epochs):
                    for x, y in batches:
                        loss = loss_fn(model(x), y)
                        optimizer.zero_grad(set_to_none=False)
                        loss.backward()
                        optimizer.step()
                        losses.append(loss.item())
                return losses
        """,
        "indexing and a tuple": """
            def train(model, optimizer, loss_fn, batches, epochs):
                losses = []
                for _ in range(epochs):
                    for i in range(len(batches)):
                        x, y = batches[i]
                        optimizer.zero_grad()
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        optimizer.step()
                        losses.append(loss.item())
                return tuple(losses)
        """,
        "a helper function": """
            import torch

            def one_step(model, optimizer, loss_fn, x, y):
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                torch.autograd.backward(loss)
                optimizer.step()
                return loss.item()

            def train(model, optimizer, loss_fn, batches, epochs):
                return [
                    one_step(model, optimizer, loss_fn, x, y)
                    for _ in range(epochs)
                    for x, y in batches
                ]
        """,
    },
    "scheduler-epochs": {
        "the textbook loop": """
            def train(model, optimizer, scheduler, loss_fn, batches, epochs):
                means = []
                for epoch in range(epochs):
                    total = 0.0
                    for x, y in batches:
                        optimizer.zero_grad()
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        optimizer.step()
                        total += loss.item()
                    scheduler.step()
                    means.append(total / len(batches))
                return means
        """,
        "a list of losses per epoch, model.zero_grad": """
            def train(model, optimizer, scheduler, loss_fn, batches, epochs):
                history = []
                for _ in range(epochs):
                    losses = []
                    for x, y in batches:
                        model.zero_grad()
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        optimizer.step()
                        losses.append(loss.item())
                    history.append(sum(losses) / len(losses))
                    scheduler.step()
                return history
        """,
        "a while loop over epochs, clearing after the step": """
            def train(model, optimizer, scheduler, loss_fn, batches, epochs):
                out, epoch = [], 0
                optimizer.zero_grad()
                while epoch < epochs:
                    total = 0.0
                    for x, y in batches:
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        optimizer.step()
                        optimizer.zero_grad()
                        total += float(loss.detach())
                    scheduler.step()
                    out.append(total / len(batches))
                    epoch += 1
                return out
        """,
        "a helper per epoch returning a tuple": """
            def run_epoch(model, optimizer, loss_fn, batches):
                total = 0.0
                for inputs, targets in batches:
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_fn(model(inputs), targets)
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                return total / len(batches)

            def train(model, optimizer, scheduler, loss_fn, batches, epochs):
                means = []
                for _ in range(epochs):
                    means.append(run_epoch(model, optimizer, loss_fn, batches))
                    scheduler.step()
                return tuple(means)
        """,
        "statistics.mean": """
            import statistics

            def train(model, optimizer, scheduler, loss_fn, batches, epochs):
                result = []
                for epoch in range(epochs):
                    seen = []
                    for x, y in batches:
                        optimizer.zero_grad()
                        loss = loss_fn(model(x), y)
                        seen.append(loss.item())
                        loss.backward()
                        optimizer.step()
                    scheduler.step()
                    result.append(statistics.mean(seen))
                return result
        """,
    },
    "evaluate": {
        "the textbook function": """
            import torch

            def evaluate(model, loss_fn, x, y):
                model.eval()
                with torch.no_grad():
                    loss = loss_fn(model(x), y).item()
                model.train()
                return loss
        """,
        "inference_mode, the mode restored": """
            import torch

            def evaluate(model, loss_fn, x, y):
                was_training = model.training
                model.eval()
                with torch.inference_mode():
                    value = loss_fn(model(x), y).item()
                model.train(was_training)
                return value
        """,
        "the no_grad decorator and finally": """
            import torch

            @torch.no_grad()
            def evaluate(model, loss_fn, x, y):
                model.eval()
                try:
                    return float(loss_fn(model(x), y))
                finally:
                    model.train()
        """,
        "set_grad_enabled and train(True)": """
            import torch

            def evaluate(model, loss_fn, x, y):
                model.train(False)
                with torch.set_grad_enabled(False):
                    prediction = model(x)
                result = loss_fn(prediction, y).item()
                model.train(True)
                return result
        """,
        "the mean squared error by hand": """
            import torch

            def evaluate(model, loss_fn, x, y):
                model.eval()
                with torch.no_grad():
                    error = ((model(x) - y) ** 2).mean()
                model.train()
                return error.item()
        """,
    },
    "resume-training": {
        "the textbook pair": """
            def save(model, optimizer):
                return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

            def resume(model, optimizer, state):
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
        """,
        "deep copies": """
            import copy

            def save(model, optimizer):
                return {
                    "weights": copy.deepcopy(model.state_dict()),
                    "optim": copy.deepcopy(optimizer.state_dict()),
                }

            def resume(model, optimizer, state):
                model.load_state_dict(state["weights"])
                optimizer.load_state_dict(state["optim"])
        """,
        "through torch.save and a buffer": """
            import io
            import torch

            def save(model, optimizer):
                buffer = io.BytesIO()
                torch.save({"m": model.state_dict(), "o": optimizer.state_dict()}, buffer)
                return {"bytes": buffer.getvalue()}

            def resume(model, optimizer, state):
                loaded = torch.load(io.BytesIO(state["bytes"]))
                model.load_state_dict(loaded["m"])
                optimizer.load_state_dict(loaded["o"])
        """,
        "the optimizer first, with an epoch": """
            def save(model, optimizer):
                checkpoint = dict(epoch=3)
                checkpoint["model_state_dict"] = model.state_dict()
                checkpoint["optimizer_state_dict"] = optimizer.state_dict()
                return checkpoint

            def resume(model, optimizer, state):
                optimizer.load_state_dict(state["optimizer_state_dict"])
                model.load_state_dict(state["model_state_dict"])
                return state["epoch"]
        """,
        "weights copied by hand": """
            import torch

            def save(model, optimizer):
                return {
                    "weight": model.weight.detach().clone(),
                    "bias": model.bias.detach().clone(),
                    "optimizer": optimizer.state_dict(),
                }

            def resume(model, optimizer, state):
                with torch.no_grad():
                    model.weight.copy_(state["weight"])
                    model.bias.copy_(state["bias"])
                optimizer.load_state_dict(state["optimizer"])
        """,
    },
}

# Adam changes nothing of how a step is written: every style of train-step is right with it.
CORRECT_STYLES["adam-step"] = dict(CORRECT_STYLES["train-step"])
CORRECT_STYLES["clip-gradients"] = {
    "clip_grad_norm_ imported": """
        from torch.nn.utils import clip_grad_norm_

        def train_step(model, optimizer, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            return loss.item()
    """,
    "model.zero_grad and a named norm type": """
        import torch

        def train_step(model, optimizer, loss_fn, x, y, max_norm):
            model.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm, norm_type=2)
            optimizer.step()
            return float(loss)
    """,
    "the optimizer's parameters": """
        import torch

        def train_step(model, optimizer, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            parameters = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(parameters, max_norm)
            optimizer.step()
            return loss.item()
    """,
    "clipped by hand": """
        import torch

        def train_step(model, optimizer, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
            scale = min(1.0, max_norm / (float(norm) + 1e-6))
            for p in model.parameters():
                p.grad.mul_(scale)
            optimizer.step()
            return loss.item()
    """,
    "the norm kept and the loss taken first": """
        import torch

        def train_step(model, optimizer, loss_fn, x, y, max_norm):
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            assert total_norm >= 0
            optimizer.step()
            return loss.item()
    """,
}


# The same update from one backward() over every micro-batch at once: nothing accumulated, but
# the values are the accumulated ones, and values decide (DESIGN.md, invariant 9: the calls a
# harness records are the code's to forge).
NOT_ACCUMULATING = {
    "stack the losses": """
        import torch

        def accumulated_step(model, optimizer, loss_fn, micro_batches):
            model.zero_grad()
            losses = torch.stack([loss_fn(model(x), y) for x, y in micro_batches])
            mean = losses.mean()
            mean.backward()
            optimizer.step()
            return mean.item()
    """,
    "one backward on the mean": """
        def accumulated_step(model, optimizer, loss_fn, micro_batches):
            optimizer.zero_grad()
            losses = [loss_fn(model(x), y) for x, y in micro_batches]
            loss = sum(losses) / len(losses)
            loss.backward()
            optimizer.step()
            return loss.item()
    """,
    "concatenate the micro-batches": """
        import torch

        def accumulated_step(model, optimizer, loss_fn, micro_batches):
            x = torch.cat([x for x, _ in micro_batches])
            y = torch.cat([y for _, y in micro_batches])
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.item()
    """,
}


@pytest.mark.parametrize("style", sorted(NOT_ACCUMULATING))
def test_one_backward_over_all_micro_batches_is_judged_by_its_values(style: str) -> None:
    exercise = next(e for e in list_exercises() if e.id == "accumulate-microbatches")
    report = judge_source(exercise, code(NOT_ACCUMULATING[style]))
    assert report.score == exercise.max_score and report.diagnosis == "correct", report.feedback


CORRECT_STYLES["sgd-momentum-by-hand"] = {
    "operators in place": """
        import torch

        def sgd_step(params, velocities, lr, momentum, weight_decay):
            with torch.no_grad():
                for p, v in zip(params, velocities):
                    if p.grad is None:
                        continue
                    g = p.grad + weight_decay * p
                    v *= momentum
                    v += g
                    p -= lr * v
    """,
    "decorated, by index": """
        import torch

        @torch.no_grad()
        def sgd_step(params, velocities, lr, momentum, weight_decay):
            for i in range(len(params)):
                if params[i].grad is not None:
                    d_p = params[i].grad.add(params[i], alpha=weight_decay)
                    velocities[i].mul_(momentum).add_(d_p)
                    params[i].add_(velocities[i], alpha=-lr)
    """,
    "copy_ into the velocity": """
        import torch

        def sgd_step(params, velocities, lr, momentum, weight_decay):
            with torch.no_grad():
                for p, v in zip(params, velocities):
                    if p.grad is None:
                        continue
                    v.copy_(momentum * v + p.grad + weight_decay * p)
                    p.copy_(p - lr * v)
    """,
    "through .data": """
        def sgd_step(params, velocities, lr, momentum, weight_decay):
            for p, v in zip(params, velocities):
                if p.grad is None:
                    continue
                grad = p.grad.data + weight_decay * p.data
                v.data = momentum * v.data + grad
                p.data = p.data - lr * v.data
    """,
    "foreach over the ones with a gradient": """
        import torch

        def sgd_step(params, velocities, lr, momentum, weight_decay):
            pairs = [(p, v) for p, v in zip(params, velocities) if p.grad is not None]
            with torch.no_grad():
                grads = [p.grad + weight_decay * p for p, _ in pairs]
                torch._foreach_mul_([v for _, v in pairs], momentum)
                torch._foreach_add_([v for _, v in pairs], grads)
                torch._foreach_add_([p for p, _ in pairs], [v for _, v in pairs], alpha=-lr)
    """,
}

CORRECT_STYLES["mlp-epoch"] = {
    "divide by the dataset's length": """
        def train_epoch(model, optimizer, loss_fn, loader):
            model.train()
            running = 0.0
            for inputs, targets in loader:
                optimizer.zero_grad()
                loss = loss_fn(model(inputs), targets)
                loss.backward()
                optimizer.step()
                running += loss.item() * inputs.size(0)
            return running / len(loader.dataset)
    """,
    "a tensor total, item at the end": """
        import torch

        def train_epoch(model, optimizer, loss_fn, loader):
            model.train()
            total, seen = torch.zeros(()), 0
            for x, y in loader:
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.detach() * x.shape[0]
                seen += x.shape[0]
            return (total / seen).item()
    """,
    "model.zero_grad and a list of pairs": """
        def train_epoch(model, optimizer, loss_fn, loader):
            model.train(True)
            pairs = []
            for batch in loader:
                x, y = batch
                model.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                pairs.append((loss.item(), len(y)))
            return sum(l * n for l, n in pairs) / sum(n for _, n in pairs)
    """,
    "summed loss per batch": """
        def train_epoch(model, optimizer, loss_fn, loader):
            model.train()
            summed, n = 0.0, 0
            for x, y in loader:
                optimizer.zero_grad()
                out = model(x)
                loss = loss_fn(out, y)
                loss.backward()
                optimizer.step()
                summed += float(loss.detach()) * len(x)
                n += len(x)
            return float(summed / n)
    """,
    "grads released by hand, enumerate": """
        def train_epoch(model, optimizer, loss_fn, loader):
            model.train()
            total = 0.0
            count = 0
            for step, (x, y) in enumerate(loader):
                for p in model.parameters():
                    p.grad = None
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item() * len(x)
                count += len(x)
            return total / count
    """,
}

CORRECT_STYLES["early-stopping"] = {
    "tensors cloned by hand": """
        import torch

        def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
            history, best, best_weights, bad = [], None, None, 0
            for _ in range(max_epochs):
                model.train()
                for x, y in train_batches:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    val = [loss_fn(model(x), y).item() for x, y in val_batches]
                model.train()
                history.append(sum(val) / len(val))
                if best is None or history[-1] < best:
                    best = history[-1]
                    best_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    bad = 0
                else:
                    bad += 1
                    if bad == patience:
                        break
            model.load_state_dict(best_weights)
            return history
    """,
    "deepcopy of the model": """
        import copy
        import torch

        def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
            losses, best_model, wait = [], None, 0
            for epoch in range(max_epochs):
                for x, y in train_batches:
                    optimizer.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    optimizer.step()
                model.eval()
                total = 0.0
                with torch.no_grad():
                    for x, y in val_batches:
                        total += loss_fn(model(x), y).item()
                model.train()
                losses.append(total / len(val_batches))
                if losses[-1] < min(losses[:-1], default=float("inf")):
                    best_model, wait = copy.deepcopy(model), 0
                else:
                    wait += 1
                if wait >= patience:
                    break
            model.load_state_dict(best_model.state_dict())
            return losses
    """,
    "best epoch's index": """
        import copy
        import torch

        def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
            losses, states = [], []
            for epoch in range(max_epochs):
                model.train()
                for x, y in train_batches:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    val = torch.stack([loss_fn(model(x), y) for x, y in val_batches]).mean()
                model.train()
                losses.append(val.item())
                states.append(copy.deepcopy(model.state_dict()))
                best = losses.index(min(losses))
                if epoch - best >= patience:
                    break
            model.load_state_dict(states[losses.index(min(losses))])
            return losses
    """,
    "inference_mode and a counter that counts up": """
        import copy
        import torch

        def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
            best_val = float("inf")
            best = copy.deepcopy(model.state_dict())
            epochs_without_improvement = 0
            val_losses = []
            epoch = 0
            while epoch < max_epochs and epochs_without_improvement < patience:
                model.train()
                for x, y in train_batches:
                    model.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    optimizer.step()
                model.eval()
                with torch.inference_mode():
                    val = sum(float(loss_fn(model(x), y)) for x, y in val_batches)
                model.train()
                val /= len(val_batches)
                val_losses.append(val)
                if val < best_val:
                    best_val, epochs_without_improvement = val, 0
                    best = copy.deepcopy(model.state_dict())
                else:
                    epochs_without_improvement += 1
                epoch += 1
            model.load_state_dict(best)
            return val_losses
    """,
    "state_dict copied with OrderedDict": """
        from collections import OrderedDict
        import torch

        def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
            out = []
            best_loss = float("inf")
            snapshot = None
            strikes = 0
            for _ in range(max_epochs):
                model.train()
                for inputs, targets in train_batches:
                    optimizer.zero_grad()
                    loss_fn(model(inputs), targets).backward()
                    optimizer.step()
                model.eval()
                with torch.no_grad():
                    means = [loss_fn(model(i), t).item() for i, t in val_batches]
                model.train()
                current = sum(means) / len(means)
                out.append(current)
                if current < best_loss:
                    best_loss = current
                    snapshot = OrderedDict((k, v.clone()) for k, v in model.state_dict().items())
                    strikes = 0
                    continue
                strikes += 1
                if strikes >= patience:
                    break
            model.load_state_dict(snapshot)
            return out
    """,
}

CORRECT_STYLES["amp-clip-step"] = {
    "torch.amp.autocast imported": """
        import torch
        from torch.amp import autocast

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            with autocast("cpu", dtype=torch.bfloat16):
                output = model(x)
                loss = loss_fn(output, y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            return loss.item()
    """,
    "backward inside autocast": """
        import torch
        from torch.nn.utils import clip_grad_norm_

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            model.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
                scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            clip_grad_norm_(model.parameters(), max_norm=max_norm)
            scaler.step(optimizer)
            scaler.update()
            return float(loss.detach())
    """,
    "grads released by hand, positional autocast": """
        import torch

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            for p in model.parameters():
                p.grad = None
            with torch.autocast("cpu", torch.bfloat16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm, norm_type=2.0)
            scaler.step(optimizer)
            scaler.update()
            return loss.detach().item()
    """,
    "parameters from the optimizer": """
        import torch

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                prediction = model(x)
            loss = loss_fn(prediction.float(), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            params = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, max_norm)
            scaler.step(optimizer)
            scaler.update()
            return loss.item()
    """,
    "a norm by hand": """
        import torch

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
            factor = min(1.0, max_norm / (norm.item() + 1e-6))
            for p in model.parameters():
                p.grad.mul_(factor)
            scaler.step(optimizer)
            scaler.update()
            return loss.item()
    """,
}


def test_the_exercises_are_every_folder_in_the_order_of_their_positions() -> None:
    folders = sorted(path.parent.name for path in EXERCISES_DIR.glob("*/exercise.toml"))
    assert sorted(e.id for e in list_exercises()) == folders
    positions = [e.position for e in list_exercises()]
    assert positions == sorted(set(positions))


@pytest.mark.parametrize("exercise", list_exercises(), ids=lambda e: e.id)
def test_every_exercise_is_proven_sound(exercise: Exercise) -> None:
    """Its proof as a server reads it: kept once proven (tests/conftest.py proves every folder
    at the session's start when no proof of its version is kept), named by all it depends on
    (the folder, the grader's code, the proof's, torch). tests/app/test_cli.py proves every
    exercise afresh with check-exercises: proving them all again here would double about 40 s
    of CPU."""
    assert proven_problems(exercise) == []


@pytest.mark.parametrize("exercise", list_exercises(), ids=lambda e: e.id)
def test_every_exercise_has_five_correct_styles_and_declared_bugs(exercise: Exercise) -> None:
    assert len(CORRECT_STYLES[exercise.id]) >= 5
    assert len(exercise.variants) >= 4


@pytest.mark.parametrize(
    ("exercise_id", "style"),
    [(exercise_id, style) for exercise_id, styles in CORRECT_STYLES.items() for style in styles],
)
def test_correct_styles_score_full(exercise_id: str, style: str) -> None:
    exercise = next(e for e in list_exercises() if e.id == exercise_id)
    report = judge_source(exercise, code(CORRECT_STYLES[exercise_id][style]))
    assert report.diagnosis == "correct", report.feedback
    assert report.score == exercise.max_score


@pytest.mark.parametrize(
    ("exercise_id", "variant_id"),
    [(e.id, v.id) for e in list_exercises() for v in e.variants],
)
def test_every_known_bug_scores_below_full_with_its_diagnosis(
    exercise_id: str, variant_id: str
) -> None:
    exercise = next(e for e in list_exercises() if e.id == exercise_id)
    variant = next(v for v in exercise.variants if v.id == variant_id)
    report = judge_source(exercise, variant.source)
    assert report.score < exercise.max_score
    assert report.diagnosis == variant.diagnosis, report.feedback
    if variant.note:
        assert variant.note in report.feedback


# Every known bug of the later units through the warm pool a server grades with (every one is
# judged in this process above; train-step's go through the sandbox in test_train_step.py).
THROUGH_THE_POOL = [
    (e.id, v.id)
    for e in list_exercises()
    if e.unit.startswith(("Unit 2", "Unit 3"))
    for v in e.variants
]


@pytest.mark.parametrize(
    ("exercise_id", "variant_id"), THROUGH_THE_POOL, ids=[f"{e}/{v}" for e, v in THROUGH_THE_POOL]
)
def test_the_warm_pool_grades_each_known_bug_with_its_diagnosis(
    exercise_id: str, variant_id: str, grading_runner: sandbox.Runner
) -> None:
    exercise = next(e for e in list_exercises() if e.id == exercise_id)
    variant = next(v for v in exercise.variants if v.id == variant_id)
    # test_pool_grades.py holds the pool's reports to cold sandboxes'.
    report = grade(exercise_id, variant.source, runner=grading_runner)
    assert report.diagnosis == variant.diagnosis, report.feedback
    assert report.score < exercise.max_score


@pytest.mark.parametrize("exercise", list_exercises(), ids=lambda e: e.id)
def test_through_the_sandbox_the_solution_scores_full_and_the_starter_nothing(
    exercise: Exercise,
    grading_runner: sandbox.Runner,
) -> None:
    solution = grade(exercise.id, exercise.solution_code, runner=grading_runner)
    assert solution.diagnosis == "correct", solution.feedback
    assert solution.score == exercise.max_score
    starter = grade(exercise.id, exercise.starter_code, runner=grading_runner)
    assert (starter.score, starter.diagnosis) == (0, "not-started")
    # Edited without changing what it does, it is run, and recognised by its trajectory.
    edited = grade(
        exercise.id, "# my attempt\n" + exercise.starter_code + "\nx = 1\n", runner=grading_runner
    )
    assert (edited.score, edited.diagnosis) == (0, "not-started"), edited.feedback


def test_check_messages_say_what_was_seen_and_what_it_means() -> None:
    exercise = next(e for e in list_exercises() if e.id == "accumulate-microbatches")
    report = judge_source(
        exercise, next(v for v in exercise.variants if v.id == "no-zero-grad").source
    )
    fresh = next(c for c in report.checks if c.id == "fresh-gradients")
    assert "case `two-micro-batches`, call 2" in fresh.message
    assert "this call's gradient plus what `.grad` held before the call" in fresh.message
    # A cause, said because the recorded calls bear it out: no zero_grad() before backward().
    assert "Nothing cleared `.grad` before this call's `backward()`" in fresh.message


def copy_exercise(tmp_path: Path, exercise_id: str) -> Path:
    folder = tmp_path / exercise_id
    shutil.copytree(EXERCISES_DIR / exercise_id, folder)
    return folder


def test_check_exercises_rejects_a_bug_no_case_can_tell_apart(tmp_path: Path) -> None:
    """Without stale gradients on entry, zeroing after the step is indistinguishable."""
    folder = copy_exercise(tmp_path, "train-step")
    toml = folder / "exercise.toml"
    toml.write_text(toml.read_text().replace("stale_grads = true", "stale_grads = false"))
    problems = prove(load_exercise(folder))
    assert any(
        "zero-after-step scores full marks: no case makes it fail a check" in p for p in problems
    ), problems


def test_check_exercises_rejects_look_alikes_it_cannot_separate(tmp_path: Path) -> None:
    """Two declared bugs with the same numbers and the same call order, told to differ."""
    folder = copy_exercise(tmp_path, "train-step")
    toml = folder / "exercise.toml"
    toml.write_text(
        toml.read_text()
        + '\n[[variants]]\nid = "no-step-again"\nfile = "bugs/no_step.py"\n'
        + 'diagnosis = "missing-backward"\n'
    )
    problems = prove(load_exercise(folder))
    assert problems == [
        "train-step: known bug no-step-again is diagnosed missing-step, not missing-backward "
        "(it differs from the reference in: basic, stale-gradients, wide-batch, momentum)"
    ]


def test_check_exercises_rejects_a_reference_that_is_a_known_bug(tmp_path: Path) -> None:
    folder = copy_exercise(tmp_path, "fix-the-loop")
    bug = (folder / "bugs" / "order_fixed_never_clears.py").read_text()
    (folder / "solution.py").write_text(bug)
    problems = prove(load_exercise(folder))
    assert (
        "fix-the-loop: the reference solution behaves exactly like known bug "
        "order-fixed-never-clears in every case"
    ) in problems


def test_check_exercises_rejects_a_starter_that_is_the_reference(tmp_path: Path) -> None:
    folder = copy_exercise(tmp_path, "train-step")
    (folder / "starter.py").write_text((folder / "solution.py").read_text())
    assert prove(load_exercise(folder)) == [
        "train-step: the reference solution scores 0/10 (not-started): Not scored: your code "
        "is the starter code, or behaves exactly as it does."
    ]


def test_check_exercises_rejects_a_known_bug_that_is_the_starter(tmp_path: Path) -> None:
    folder = copy_exercise(tmp_path, "fix-the-loop")
    (folder / "bugs" / "as_given.py").write_text((folder / "starter.py").read_text())
    toml = folder / "exercise.toml"
    toml.write_text(
        toml.read_text()
        + '\n[[variants]]\nid = "as-given"\nfile = "bugs/as_given.py"\n'
        + 'diagnosis = "step-before-backward"\n'
    )
    problems = prove(load_exercise(folder))
    assert problems == [
        "fix-the-loop: known bug as-given behaves exactly like the starter code, which is "
        "not-started: remove it"
    ]


def test_check_exercises_rejects_a_failing_reference_and_unknown_checks(tmp_path: Path) -> None:
    folder = copy_exercise(tmp_path, "grad-magnitude")
    solution = folder / "solution.py"
    solution.write_text(solution.read_text().replace("total = 0.0", "total = 1 / 0"))
    problems = prove(load_exercise(folder))
    assert problems[0].startswith("grad-magnitude: the reference solution scores 0/10")
    toml = folder / "exercise.toml"
    toml.write_text(toml.read_text().replace("returns-float = 1", "returns-flaot = 1"))
    with pytest.raises(ValueError, match="'returns-flaot' is no check of kind 'gradient-reading'"):
        load_exercise(folder)


def test_check_exercises_rejects_a_reference_that_steps_twice(tmp_path: Path) -> None:
    """Judged against itself it scores full marks; against the declared optimizer it does not."""
    folder = copy_exercise(tmp_path, "train-step")
    solution = folder / "solution.py"
    text = solution.read_text()
    assert text.count("optimizer.step()") == 1
    solution.write_text(text.replace("optimizer.step()", "optimizer.step()\n    optimizer.step()"))
    problems = prove(load_exercise(folder))
    assert problems == [
        f"{folder}/solution.py: after iteration 1 of case basic the reference's weights are not "
        "one step of the declared optimizer (sgd, lr 0.1) on that batch: make the "
        "solution zero, backward and step once per batch"
    ]


def test_check_exercises_flags_a_bug_declared_under_a_name_the_models_do_not_give(
    tmp_path: Path,
) -> None:
    """A loop that never clears, declared as stepping twice: learners would be told so."""
    folder = copy_exercise(tmp_path, "train-step")
    toml = folder / "exercise.toml"
    toml.write_text(
        toml.read_text().replace('diagnosis = "missing-zero-grad"', 'diagnosis = "step-twice"', 1)
    )
    problems = prove(load_exercise(folder))
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        f"{folder}/exercise.toml: variants (no-zero-grad): declared 'step-twice', but the "
        "grader's own models explain its numbers and calls as 'missing-zero-grad'"
    ), problems


def test_check_exercises_fails_an_exercise_with_a_surviving_mutant(tmp_path: Path) -> None:
    """Without the loss checks, a reference that forgets to record a loss passes every check."""
    folder = copy_exercise(tmp_path, "fix-the-loop")
    toml = folder / "exercise.toml"
    text = toml.read_text().replace("losses-match = 3\n", "").replace("returns-list = 1\n", "")
    toml.write_text(text)
    problems = prove(load_exercise(folder))
    assert (
        "fix-the-loop: a mutant of the reference changes what the harness records but passes "
        "every check (delete a statement: line 10 `losses.append(loss.item())`)"
    ) in problems


def test_every_kind_of_edit_makes_mutants_of_the_references() -> None:
    edits = {m.edit for e in list_exercises() for m in reference_mutants(e)}
    assert edits == set(Edit)
    train_step = next(e for e in list_exercises() if e.id == "train-step")
    described = [m.describe() for m in reference_mutants(train_step)]
    assert "change set_to_none: line 3 `optimizer.zero_grad()`" in described
    assert "delete a statement: line 6 `optimizer.step()`" in described
    assert "move the return: line 7 `return loss.item()` up before line 5 `loss.backward()`" in (
        described
    )


def test_the_most_hidden_cases_an_exercise_may_have_fit_in_one_later_input() -> None:
    largest = CaseSpec(
        id="x" * MAX_CASE_ID_CHARS,
        seed=2**32 - 1,
        in_features=64,
        out_features=64,
        batch_size=256,
        steps=50,
        lr=1.2345678901234567e-300,
        momentum=0.12345678901234567,
        stale_grads=True,
        micro_batches=16,
        epochs=20,
        grad_state="present",
        hidden=True,
    )
    later_input = json.dumps([largest.harness_spec()] * MAX_CASES, separators=(",", ":")).encode()
    assert len(later_input) <= LATER_INPUT_MAX_BYTES // 2


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda text: text + "".join(extra_case(n) for n in range(MAX_CASES)), "cases"),
        (lambda text: text.replace('id = "basic"', f'id = "{"b" * 49}"'), "cases.0.id"),
        (lambda text: text.replace("seed = 0", "seed = -1", 1), "cases.0.seed"),
        (lambda text: text.replace("seed = 0", f"seed = {2**32}", 1), "cases.0.seed"),
    ],
)
def test_an_exercise_with_too_many_or_too_large_cases_is_refused(
    tmp_path: Path, edit: Callable[[str], str], field: str
) -> None:
    folder = copy_exercise(tmp_path, "train-step")
    toml = folder / "exercise.toml"
    toml.write_text(edit(toml.read_text()))
    with pytest.raises(ValueError, match=re.escape(field)):
        load_exercise(folder)


def extra_case(number: int) -> str:
    return (
        f'\n[[cases]]\nid = "extra-{number}"\nseed = {number}\nin_features = 2\n'
        "out_features = 1\nbatch_size = 4\nsteps = 2\nhidden = true\n"
    )


@pytest.mark.parametrize("setting", ['optimizer = "sgd"', 'optimizer = "adam"', "dampening = 0.1"])
def test_an_optimizer_by_hand_refuses_a_declared_optimizer(tmp_path: Path, setting: str) -> None:
    """The learner's function is the optimizer: a declared one, or a setting of it the kind does
    not hand over, would change nothing (or only the reference), so it is refused by name."""
    folder = copy_exercise(tmp_path, "sgd-momentum-by-hand")
    toml = folder / "exercise.toml"
    text = toml.read_text().replace("momentum = 0.5\n", "")  # a case whose optimizer is bare
    toml.write_text(text.replace('id = "no-decay"\n', f'id = "no-decay"\n{setting}\n'))
    name = setting.split(" ")[0]
    with pytest.raises(
        ValueError, match=f"cases \\(no-decay\\): '{name}': kind 'optimizer-by-hand'"
    ):
        load_exercise(folder)


# The third unit's mistakes a class makes, each named by a diagnosis judged from the values its
# run returns: (exercise, the program, the code, the score, words said, words that would be
# false of it). The programs are the exercises' known bugs and the corpus's learner loops.
NAMED_MISTAKES = [
    (
        "mlp-epoch",
        "exercises/mlp-epoch/bugs/no_zero_grad.py",
        "grads-accumulated-across-batches",
        6,
        "those of training whose gradients were never cleared between batches",
        "Not every check passed",
    ),
    (
        "early-stopping",
        "exercises/early-stopping/bugs/no_zero_grad.py",
        "grads-accumulated-across-batches",
        9,
        "each update used the sum of its batch's gradient and every earlier batch's",
        "Not every check passed",
    ),
    (
        "early-stopping",
        "exercises/early-stopping/bugs/against_last_epoch.py",
        "improvement-against-last-epoch",
        6,
        "epoch 6's validation loss, 0.635341, is below epoch 5's (0.63676) but not below the "
        "lowest so far, epoch 4's (0.614348)",
        "one epoch away from where the rule stops",
    ),
    (
        "amp-clip-step",
        "exercises/amp-clip-step/bugs/clip_after_step.py",
        "unclipped-step",
        4,
        "the unscaled gradients' norm was 3.953, above `max_norm` (0.5)",
        "still multiplied by the scaler's scale",
    ),
    (
        "amp-clip-step",
        "tests/graders/corpus/amp-clip-step/no_clip.py",
        "unclipped-step",
        4,
        "left out, or called after the step, it clips nothing the step used",
        "Not every check passed",
    ),
    (
        "amp-clip-step",
        "exercises/amp-clip-step/bugs/no_autocast.py",
        "missing-autocast",
        4,
        "you returned 3.92218, the loss computed in float32; under autocast (bfloat16) it is "
        "3.91968",
        "not clipped",
    ),
    (
        "amp-clip-step",
        "exercises/amp-clip-step/bugs/no_update.py",
        "scaler-not-updated",
        0,
        "After call 1 of case `basic` the scaler's scale was still 2**10, as before the call",
        "Your code raised an exception, so what it does could not be checked.",
    ),
]


@pytest.mark.parametrize(
    ("exercise_id", "program", "diagnosis", "score", "said", "false"),
    NAMED_MISTAKES,
    ids=[f"{e}/{Path(p).stem}" for e, p, *_ in NAMED_MISTAKES],
)
def test_a_mistake_of_the_third_unit_is_named_with_words_true_of_it(
    exercise_id: str,
    program: str,
    diagnosis: str,
    score: float,
    said: str,
    false: str,
    grading_runner: sandbox.Runner,
) -> None:
    source = (EXERCISES_DIR.parent / program).read_text()
    report = grade(exercise_id, source, runner=grading_runner)
    assert (report.diagnosis, report.score) == (diagnosis, score), report.feedback
    words = "\n".join([report.feedback, *(c.message for c in report.checks)])
    assert said in words
    assert false not in words


@pytest.mark.parametrize(
    ("exercise_id", "program"),
    [
        # train() first, eval() at the end; and neither
        ("mlp-epoch", "tests/graders/corpus/mlp-epoch/eval_at_the_end.py"),
        ("mlp-epoch", "exercises/mlp-epoch/bugs/no_train_mode.py"),
    ],
)
def test_left_in_eval_says_what_was_measured_when_the_function_returned(
    exercise_id: str, program: str
) -> None:
    exercise = next(e for e in list_exercises() if e.id == exercise_id)
    source = (EXERCISES_DIR.parent / program).read_text()
    report = judge_source(exercise, source)
    message = next(c.message for c in report.checks if c.id == "training-mode")
    assert "when your function returned, the model was in evaluation mode" in message
    assert "still in it" not in message and "still in it" not in report.feedback
    assert report.diagnosis == "missing-train-mode"


@pytest.mark.parametrize(
    ("updated", "second_call"),
    [
        ("", "raise ValueError('mine')"),  # no update(), but no refusal of torch's ended the run
        ("scaler.update()", "raise RuntimeError('after step()')"),  # updated: the scale moved
    ],
)
def test_a_run_that_raised_is_named_scaler_not_updated_only_when_both_show_it(
    updated: str, second_call: str
) -> None:
    exercise = next(e for e in list_exercises() if e.id == "amp-clip-step")
    source = code(
        f"""
        import torch
        calls = []

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            calls.append(1)
            if len(calls) > 1:
                {second_call}
            optimizer.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            {updated}
            return loss.item()
        """
    )
    report = judge_source(exercise, source)
    assert (report.diagnosis, report.score) == ("runtime-error", 0), report.feedback
    assert "`scaler.update()` did not run" not in report.feedback
