"""The kinds of the third unit, "a whole training loop": `dataloader-epoch` (mlp-epoch),
`mixed-precision-step` (amp-clip-step), `patience-fit` (early-stopping) and
`optimizer-by-hand` (sgd-momentum-by-hand).

Each kind's reference, which the grader computes itself outside the sandbox, equals what torch
computes by the ordinary means (a real `torch.optim.SGD`). Each known bug goes through the warm
pool in tests/graders/test_unit.py, with the later units' others.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graders.exercise import CaseSpec
from graders.exercises import get_exercise
from graders.feedback import diagnosis_words
from graders.grading import trusted_trajectories
from graders.harness import build_case
from graders.judging import DECLARED
from graders.kinds import (
    dataloader_epoch,
    kind_of,
    optimizer_by_hand,
    patience_fit,
)
from graders.proving import judge_source

UNIT = ("mlp-epoch", "amp-clip-step", "early-stopping", "sgd-momentum-by-hand")


def test_the_unit_is_listed_under_its_heading_with_kinds_that_own_their_codes() -> None:
    for exercise_id in UNIT:
        exercise = get_exercise(exercise_id)
        assert exercise.unit == "Unit 3: a whole training loop"
        # Its kind's own codes, and those several kinds' models give (graders.judging).
        owned = {d.code for d in kind_of(exercise).diagnoses} | {d.code for d in DECLARED}
        for variant in exercise.variants:
            assert variant.diagnosis in owned | {
                "grad-none-error",
                "wrong-return-type",
                "runtime-error",
                "non-finite-value",
            }
    # A code of this unit's kinds is said as `incorrect` on another kind's exercise.
    evaluate = get_exercise("evaluate")
    assert diagnosis_words("parameter-rebound", evaluate) == diagnosis_words("incorrect", evaluate)


# --- dataloader-epoch ------------------------------------------------------------------------


@pytest.mark.parametrize("spec", get_exercise("mlp-epoch").cases, ids=lambda s: s.id)
def test_the_epoch_reference_is_a_real_dataloader_epoch(spec: CaseSpec) -> None:
    """The grader's epoch is an ordinary one over a real DataLoader, whose last batch is short."""
    model, optimizer, batches = dataloader_epoch.build_epoch_case(spec.harness_spec())
    assert not model.training and [type(m) for m in model] == [nn.Linear, nn.ReLU, nn.Linear]
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=spec.batch_size
    )
    assert len(loader.dataset) % spec.batch_size != 0  # type: ignore[arg-type]
    model.train()
    total = 0.0
    for bx, by in loader:
        optimizer.zero_grad()
        loss = nn.MSELoss()(model(bx), by)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(bx)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.allclose(flat, torch.tensor(dataloader_epoch.expected_parameters(spec)))
    # The reference's own steps give these batch losses; their mean per example is the loop's,
    # and the short last batch makes the plain mean of the batch means another number.
    losses = _batch_losses(spec)
    assert dataloader_epoch.weighted_mean(losses) == pytest.approx(total / len(x), rel=1e-5)
    plain = sum(loss for loss, _ in losses) / len(losses)
    assert plain != pytest.approx(total / len(x), rel=1e-3)


def _batch_losses(spec: CaseSpec) -> list[tuple[float, int]]:
    trace = trusted_trajectories(get_exercise("mlp-epoch"))["reference"][spec.id]
    losses = dataloader_epoch.losses_along(spec, trace)
    assert losses is not None
    return losses


def test_the_mean_is_judged_along_the_learners_own_steps() -> None:
    """A loop that never clears the gradients trains wrong, but its mean per example of its own
    batches' losses is right: it loses the weights' points only."""
    exercise = get_exercise("mlp-epoch")
    source = exercise.solution_code.replace("        optimizer.zero_grad()\n", "")
    assert source != exercise.solution_code
    report = judge_source(exercise, source)
    assert [c.id for c in report.checks if not c.passed] == ["weights-match"]


# --- early-stopping --------------------------------------------------------------------------


@pytest.mark.parametrize("spec", get_exercise("early-stopping").cases, ids=lambda s: s.id)
def test_the_stopping_reference_is_an_ordinary_fit(spec: CaseSpec) -> None:
    """The grader's training and validation are an ordinary loop's; the rule stops where a
    plain patience counter does; the visible cases stop before `max_epochs`, at an epoch later
    than the best one, so a kept state_dict, an off-by-one patience and a count never reset
    all show."""
    model, train, validation = patience_fit.build_fit_case(spec.harness_spec())
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr)
    losses, steps = [], []
    for _ in range(spec.epochs):
        for x, y in train:
            optimizer.zero_grad()
            nn.MSELoss()(model(x), y).backward()
            optimizer.step()
            steps.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        with torch.no_grad():
            losses.append(sum(nn.MSELoss()(model(x), y).item() for x, y in validation) / 2)
    trained = patience_fit.trained(spec)
    assert all(torch.allclose(a, torch.tensor(b)) for a, b in zip(steps, trained, strict=True))
    best, without, stop = float("inf"), 0, spec.epochs
    for epoch, loss in enumerate(losses, start=1):
        best, without = (loss, 0) if loss < best else (best, without + 1)
        if without == spec.patience:
            stop = epoch
            break
    assert (patience_fit.stopping_epoch(losses, spec.patience) or spec.epochs) == stop
    if not spec.hidden:
        assert patience_fit.best_epoch(losses[:stop]) < stop < spec.epochs
        assert patience_fit.stopping_epoch(losses, spec.patience, consecutive=False) != stop


# --- optimizer-by-hand -----------------------------------------------------------------------


@pytest.mark.parametrize("spec", get_exercise("sgd-momentum-by-hand").cases, ids=lambda s: s.id)
def test_each_hand_step_is_judged_against_a_real_sgd(spec: CaseSpec) -> None:
    """The grader's step from the reference's own states is torch.optim.SGD's, call after call,
    with the bias skipped on every second call; and the momentum shows in the velocities."""
    case = build_case(spec.harness_spec())
    assert isinstance(case.model, nn.Linear)  # the kind's model
    optimizer = torch.optim.SGD(
        case.model.parameters(), lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay
    )
    before = None
    for call in range(spec.steps):
        optimizer_by_hand.gradients_for_call(case, call)
        assert (case.model.bias.grad is None) == (call % 2 == 1)
        optimizer.step()
        want, _, bias_grad = optimizer_by_hand.one_step(spec, call, before)
        assert (bias_grad is None) == (call % 2 == 1)
        assert torch.allclose(want["weight"], case.model.weight.detach(), atol=1e-6)
        assert torch.allclose(want["bias"], case.model.bias.detach(), atol=1e-6)
        buffer = optimizer.state[case.model.weight]["momentum_buffer"]
        assert torch.allclose(want["weight_velocity"], buffer, atol=1e-6)
        before = {name: value.tolist() for name, value in want.items()}
    assert spec.momentum > 0


def test_a_hand_step_told_where_its_one_mistake_is() -> None:
    """A velocity rebound keeps every weight step right from where it starts: only the velocities
    fail, in the first call, with the learner's argument named."""
    exercise = get_exercise("sgd-momentum-by-hand")
    bug = next(v for v in exercise.variants if v.id == "rebinds-velocity")
    report = judge_source(exercise, bug.source)
    failed = {c.id: c.message for c in report.checks if not c.passed}
    assert list(failed) == ["velocities-match"]
    assert "call 1: after the call, `velocities[0]" in failed["velocities-match"]
    assert report.diagnosis == "velocity-rebound"
