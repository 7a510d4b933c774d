"""What a correct answer is told is true of it, whatever its style: each exercise's `correct`
text says the values its checks compared, never how the code got them (docs/authoring.md,
"`exercise.toml` keys"). Correct answers written the unusual way, graded through the warm pool:
full marks, the measured words said, and none of the ways the old texts praised."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

import sandbox
from graders import grade
from graders.exercises import get_exercise
from graders.proving import unmeasured_in_correct
from tests.graders.conftest import SHARED_LIMITS


@dataclass(frozen=True)
class Style:
    exercise: str
    name: str
    source: str
    said: str  # the measured words of the exercise's correct text
    unsaid: tuple[str, ...]  # what is false of this code: never in what it is told


STYLES = [
    Style(
        "sgd-momentum-by-hand",
        "through .data, no no_grad",
        """
        def sgd_step(params, velocities, lr, momentum, weight_decay):
            for p, v in zip(params, velocities):
                if p.grad is not None:
                    v.mul_(momentum).add_(p.grad + weight_decay * p.data)
                    p.data.sub_(lr * v)
        """,
        "equal those of PyTorch's SGD with momentum and weight decay",
        ("no_grad", "under", "the weight decay added to the gradient"),
    ),
    Style(
        "sgd-momentum-by-hand",
        "detached views, decay added to the velocity",
        """
        def sgd_step(params, velocities, lr, momentum, weight_decay):
            for p, v in zip(params, velocities):
                if p.grad is None:
                    continue
                v.mul_(momentum).add_(p.grad).add_(p.detach(), alpha=weight_decay)
                p.detach().add_(v, alpha=-lr)
        """,
        "the bias and its velocity unchanged on the calls where its gradient was None",
        ("no_grad", "the weight decay added to the gradient"),
    ),
    Style(
        "mlp-epoch",
        "gradients from autograd.grad, set by hand",
        """
        import torch

        def train_epoch(model, optimizer, loss_fn, loader):
            model.train()
            params = list(model.parameters())
            total, count = 0.0, 0
            for x, y in loader:
                loss = loss_fn(model(x), y)
                for p, g in zip(params, torch.autograd.grad(loss, params)):
                    p.grad = g
                optimizer.step()
                total += loss.item() * len(x)
                count += len(x)
            return total / count
        """,
        "every parameter equals one optimizer step on that batch's gradient alone",
        ("clears", "backpropagates", "zero_grad"),
    ),
    Style(
        "mlp-epoch",
        "a closure, the mean weighted by the loader's batch sizes",
        """
        def train_epoch(model, optimizer, loss_fn, loader):
            model.train()
            weighted = []
            for x, y in loader:
                def closure():
                    optimizer.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    return loss
                weighted.append((optimizer.step(closure).item(), x.shape[0]))
            return sum(l * n for l, n in weighted) / sum(n for _, n in weighted)
        """,
        "the number you returned is the mean loss per example",
        ("puts the model in training mode, clears",),
    ),
    Style(
        "early-stopping",
        "gradients from autograd.grad, best weights as one vector",
        """
        import torch
        from torch.nn.utils import parameters_to_vector, vector_to_parameters

        def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
            params = list(model.parameters())
            losses, best, best_vector = [], float("inf"), None
            for _ in range(max_epochs):
                model.train()
                for x, y in train_batches:
                    grads = torch.autograd.grad(loss_fn(model(x), y), params)
                    for p, g in zip(params, grads):
                        p.grad = g
                    optimizer.step()
                model.eval()
                val = sum(loss_fn(model(x), y).item() for x, y in val_batches)
                losses.append(val / len(val_batches))
                if losses[-1] < best:
                    best, best_vector = losses[-1], parameters_to_vector(params).detach().clone()
                elif len(losses) - 1 - losses.index(best) >= patience:
                    break
            with torch.no_grad():
                vector_to_parameters(best_vector, params)
            model.train()
            return losses
        """,
        "with the weights of the epoch with the lowest validation loss",
        ("a copy of the best epoch's weights loaded back", "measures the validation loss"),
    ),
    Style(
        "early-stopping",
        "best weights copied into the parameters in place",
        """
        def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
            out, saved, bad = [], None, 0
            for epoch in range(max_epochs):
                model.train()
                for x, y in train_batches:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                val = [loss_fn(model(x), y).item() for x, y in val_batches]
                out.append(sum(val) / len(val))
                if out[-1] <= min(out):
                    saved, bad = [p.detach().clone() for p in model.parameters()], 0
                else:
                    bad += 1
                    if bad == patience:
                        break
            for p, kept in zip(model.parameters(), saved):
                p.data.copy_(kept)
            return out
        """,
        "Every validation loss you returned matched the reference fit's",
        ("loaded back",),
    ),
    Style(
        "amp-clip-step",
        "the scaler's work done by hand",
        """
        import math
        import torch

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            scale = scaler.get_scale()
            (loss.float() * scale).backward()
            params = list(model.parameters())
            for p in params:
                p.grad.div_(scale)
            norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
            if math.isfinite(norm):
                torch.nn.utils.clip_grad_norm_(params, max_norm)
                optimizer.step()
            state = scaler.state_dict()  # the scaler kept only as the store of the scale
            grown = scale * 2.0 if scale * 2.0 <= torch.finfo(torch.float32).max else scale
            state["scale"] = grown if math.isfinite(norm) else scale * 0.5
            scaler.load_state_dict(state)
            return loss.item()
        """,
        "the weights moved by one step on the gradients clipped to `max_norm`",
        ("scales the loss for backward", "unscales", "steps through the scaler"),
    ),
    Style(
        "amp-clip-step",
        "unscale_, then optimizer.step only where the gradients are finite",
        """
        import torch

        def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            grads = [p.grad for p in model.parameters()]
            if all(bool(torch.isfinite(g).all()) for g in grads):
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                optimizer.step()
            scaler.update()
            return loss.item()
        """,
        "or stayed where the scaled gradients overflowed",
        ("steps through the scaler",),
    ),
    Style(
        "prove-accumulation",
        "copies rebuilt from lists",
        """
        import torch

        def accumulation_demo(model, loss_fn, x, y):
            loss_fn(model(x), y).backward()
            first = torch.tensor(model.weight.grad.tolist())
            loss_fn(model(x), y).backward()
            return first, torch.tensor(model.weight.grad.tolist())
        """,
        "the second twice it",
        (".clone()", "clone"),
    ),
    Style(
        "grad-magnitude",
        "a missing gradient counted as zeros",
        """
        import torch

        def total_grad_magnitude(model):
            params = model.parameters()
            grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
            return float(sum(g.abs().sum() for g in grads))
        """,
        "the sum of the gradients' magnitudes in every case",
        ("skips",),
    ),
    Style(
        "train-step",
        "gradients from autograd.grad",
        """
        import torch

        def train_step(model, optimizer, loss_fn, x, y):
            params = list(model.parameters())
            loss = loss_fn(model(x), y)
            for p, g in zip(params, torch.autograd.grad(loss, params)):
                p.grad = g
            optimizer.step()
            return loss.item()
        """,
        "one optimizer step on this batch's gradient alone",
        ("zero_grad", "`backward()`"),
    ),
    Style(
        "adam-step",
        "gradients from autograd.grad",
        """
        import torch

        def train_step(model, optimizer, loss_fn, x, y):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            loss = loss_fn(model(x), y)
            grads = torch.autograd.grad(loss, params)
            for p, g in zip(params, grads):
                p.grad = g.clone()
            optimizer.step()
            return float(loss)
        """,
        "equal one Adam step's on this call's gradient",
        ("zero_grad", "`backward()`", "`exp_avg`"),
    ),
    Style(
        "accumulate-microbatches",
        "losses summed, gradients divided by hand",
        """
        def accumulated_step(model, optimizer, loss_fn, micro_batches):
            for p in model.parameters():
                p.grad = None
            total = 0.0
            for x, y in micro_batches:
                loss = loss_fn(model(x), y)
                loss.backward()
                total += loss.item()
            for p in model.parameters():
                p.grad /= len(micro_batches)
            optimizer.step()
            return total / len(micro_batches)
        """,
        "the whole batch's gradient (its micro-batches' gradients averaged)",
        ("counted one step per call", "zero_grad"),
    ),
    Style(
        "clip-gradients",
        "a norm of norms, gradients scaled by hand",
        """
        import torch

        def train_step(model, optimizer, loss_fn, x, y, max_norm):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            norms = torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()])
            coefficient = torch.clamp(max_norm / (torch.linalg.vector_norm(norms) + 1e-6), max=1.0)
            torch._foreach_mul_([p.grad for p in model.parameters()], coefficient.item())
            optimizer.step()
            return loss.item()
        """,
        "one optimizer step on this batch's gradient clipped to `max_norm`",
        ("clip_grad_norm_",),
    ),
    Style(
        "fix-the-loop",
        "a closure per batch",
        """
        def train(model, optimizer, loss_fn, batches, epochs):
            losses = []
            for _ in range(epochs):
                for x, y in batches:
                    def closure():
                        model.zero_grad()
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        return loss
                    losses.append(float(optimizer.step(closure)))
            return losses
        """,
        "After every batch of every epoch the weights equal one optimizer step",
        ("`zero_grad()`, ran", "Your loop"),
    ),
    Style(
        "scheduler-epochs",
        "the learning rate set by hand from the scheduler's settings",
        """
        def train(model, optimizer, scheduler, loss_fn, batches, epochs):
            base = [group["lr"] for group in optimizer.param_groups]
            means = []
            for epoch in range(epochs):
                factor = scheduler.gamma ** (epoch // scheduler.step_size)
                for group, lr in zip(optimizer.param_groups, base):
                    group["lr"] = lr * factor
                total = 0.0
                for x, y in batches:
                    optimizer.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                means.append(total / len(batches))
                scheduler.step()
            return means
        """,
        "each step at the learning rate the schedule gives its epoch",
        ("Your loop steps",),
    ),
    Style(
        "evaluate",
        "inference_mode and train(False)",
        """
        import torch

        def evaluate(model, loss_fn, x, y):
            was_training = model.training
            model.train(False)
            with torch.inference_mode():
                value = float(loss_fn(model(x), y))
            model.train(was_training)
            return value
        """,
        "The loss you returned is the model's with dropout off",
        ("Your function measures",),
    ),
    Style(
        "resume-training",
        "weights copied in place, state kept by deepcopy",
        """
        import copy
        import torch

        def save(model, optimizer):
            return {
                "weights": [p.detach().clone() for p in model.parameters()],
                "optimizer": copy.deepcopy(optimizer.state_dict()),
            }

        def resume(model, optimizer, state):
            with torch.no_grad():
                for p, saved in zip(model.parameters(), state["weights"]):
                    p.copy_(saved)
            optimizer.load_state_dict(state["optimizer"])
        """,
        "After `resume` the fresh model holds the saved weights",
        ("Your checkpoint keeps",),
    ),
]


@pytest.mark.parametrize("style", STYLES, ids=lambda s: f"{s.exercise}: {s.name}")
def test_a_correct_answer_in_any_style_is_told_only_what_was_measured(
    style: Style, grading_runner: sandbox.Runner
) -> None:
    source = textwrap.dedent(style.source).strip() + "\n"
    report = grade(style.exercise, source, SHARED_LIMITS, grading_runner)
    assert report.score == report.max_score and report.diagnosis == "correct", report
    assert style.said in report.feedback, report.feedback
    assert get_exercise(style.exercise).correct in report.feedback
    shown = "\n\n".join([report.feedback, *(c.message for c in report.checks)])
    for words in style.unsaid:
        assert words not in shown, (words, shown)


def test_every_exercise_has_a_style_here_and_the_unit_three_ones_two() -> None:
    counts = {s.exercise: sum(t.exercise == s.exercise for t in STYLES) for s in STYLES}
    assert len(counts) == 14
    for exercise in ("sgd-momentum-by-hand", "mlp-epoch", "early-stopping", "amp-clip-step"):
        assert counts[exercise] >= 2


@pytest.mark.parametrize(
    ("exercise_id", "correct", "refused"),
    [
        (
            "sgd-momentum-by-hand",
            "Your update is SGD's own: the parameter changed in place under no_grad. Every "
            "weight and velocity matched torch.optim.SGD's.",
            ["no_grad", "torch.optim.SGD", "under"],
        ),
        (
            "amp-clip-step",
            "Your step scales the loss for backward and unscales the gradients before clipping.",
            ["backward", "unscales"],
        ),
        (
            "prove-accumulation",
            "The second is twice the first, both taken with `.clone()`.",
            ["`.clone()`"],
        ),
        (
            "mlp-epoch",
            "Your epoch clears, backpropagates and steps once per batch.",
            ["clears", "backpropagates"],
        ),
        ("adam-step", "Adam's state (`exp_avg`, `step`) matched.", ["`exp_avg`", "`step`"]),
    ],
)
def test_check_exercises_refuses_a_correct_text_naming_what_no_check_measured(
    exercise_id: str, correct: str, refused: list[str]
) -> None:
    exercise = get_exercise(exercise_id).model_copy(update={"correct": correct})
    problems = unmeasured_in_correct(exercise)
    named = [p.split("says ", 1)[1].split(", which", 1)[0] for p in problems]
    assert named == refused
    assert all("say the values the checks compared" in p for p in problems)


def test_every_exercise_s_correct_text_names_only_what_its_checks_measure() -> None:
    for exercise_id in [s.exercise for s in STYLES]:
        assert unmeasured_in_correct(get_exercise(exercise_id)) == []
