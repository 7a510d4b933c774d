"""The kinds of the second unit: `epoch-loop` (scheduler-epochs), `evaluation` (evaluate) and
`checkpoint` (resume-training).

Each kind's reference, which the grader computes itself outside the sandbox, equals what torch
computes by the ordinary means (a real StepLR, a model in eval mode, a torch.save round trip);
a few learners' variations are graded through the warm pool (each known bug goes through it in
tests/graders/test_unit.py, with the later units' others).
"""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import sandbox
from graders import grade
from graders.exercise import CaseSpec, Exercise
from graders.exercises import get_exercise
from graders.feedback import diagnosis_words
from graders.harness import build_case, flat_parameters
from graders.kinds import KINDS, checkpoint, epoch_loop, evaluation, kind_of
from graders.proving import judge_source

UNIT = ("scheduler-epochs", "evaluate", "resume-training")


def exercise(exercise_id: str) -> Exercise:
    return get_exercise(exercise_id)


def test_the_kinds_are_named_by_what_they_judge_and_own_their_codes() -> None:
    assert [kind_of(exercise(e)).name for e in UNIT] == ["epoch-loop", "evaluation", "checkpoint"]
    assert [exercise(e).position for e in UNIT] == [8, 9, 10]
    owned = [record.code for kind in KINDS.values() for record in kind.diagnoses]
    assert len(owned) == len(set(owned))  # no code is two kinds'
    for exercise_id in UNIT:
        for variant in exercise(exercise_id).variants:
            assert variant.diagnosis in {d.code for d in kind_of(exercise(exercise_id)).diagnoses}
    # A code of one kind is not said, in its words, of another kind's exercise.
    said = diagnosis_words("scheduler-never", exercise("evaluate"))
    assert said == diagnosis_words("incorrect", exercise("evaluate"))


@pytest.mark.parametrize(
    ("exercise_id", "words"),
    [
        ("scheduler-epochs", "at the learning rate the schedule gives its epoch"),
        ("evaluate", "the model's with dropout off"),
        ("resume-training", "equals the step of training that never stopped"),
    ],
)
def test_the_correct_message_speaks_of_what_the_exercise_asks(exercise_id: str, words: str) -> None:
    report = judge_source(exercise(exercise_id), exercise(exercise_id).solution_code)
    assert report.diagnosis == "correct"
    assert words in report.feedback
    assert "zero, backward, step" not in report.feedback


# --- epoch-loop ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", exercise("scheduler-epochs").cases, ids=lambda s: s.id)
def test_the_epoch_reference_is_a_real_steplr_loop(spec: CaseSpec) -> None:
    case = build_case(spec.harness_spec())
    scheduler = torch.optim.lr_scheduler.StepLR(
        case.optimizer, step_size=spec.lr_step_size, gamma=spec.lr_gamma
    )
    weights, means, lrs = [], [], []
    for _ in range(spec.epochs):
        losses = []
        for x, y in case.inputs:
            lrs.append(case.optimizer.param_groups[0]["lr"])
            case.optimizer.zero_grad()
            loss = case.loss_fn(case.model(x), y)
            loss.backward()
            case.optimizer.step()
            losses.append(loss.item())
            weights.append(torch.tensor(flat_parameters(case.model)))
        scheduler.step()
        means.append(sum(losses) / len(losses))
    expected = epoch_loop.expected(spec)
    assert expected.lrs == pytest.approx(lrs)
    assert expected.means == pytest.approx(means)
    assert all(torch.allclose(a, b) for a, b in zip(expected.weights, weights, strict=True))
    # The schedule changes the rate within the case: a loop that never steps it is seen.
    assert len(set(lrs)) > 1


# --- evaluation ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", exercise("evaluate").cases, ids=lambda s: s.id)
def test_the_evaluation_reference_is_the_model_in_eval_mode(spec: CaseSpec) -> None:
    model, loss_fn, x, y = evaluation.build_evaluation_case(spec.harness_spec())
    assert isinstance(model, nn.Sequential) and isinstance(loss_fn, nn.MSELoss)
    first, _, dropout, last = (model[i] for i in range(4))
    assert isinstance(dropout, nn.Dropout) and dropout.p == spec.dropout
    # In evaluation mode dropout is the identity.
    with torch.no_grad():
        by_hand = last(torch.relu(first(x)))
    expected = nn.functional.mse_loss(by_hand, y).item()
    assert evaluation.expected_loss(spec) == pytest.approx(expected, rel=1e-5)
    # In training mode (dropout) the loss is another: eval() is observable.
    torch.manual_seed(spec.seed)
    with torch.no_grad():
        in_training = nn.functional.mse_loss(model(x), y).item()
    assert in_training != pytest.approx(expected, rel=1e-3)


# --- checkpoint ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", exercise("resume-training").cases, ids=lambda s: s.id)
def test_the_checkpoint_reference_is_training_resumed_from_a_real_checkpoint(
    spec: CaseSpec,
) -> None:
    """Saved with torch.save, loaded into a fresh model and optimizer, trained on: exactly the
    grader's training without interruption."""
    longer = {**spec.harness_spec(), "steps": 2 * spec.steps}
    case = build_case(longer)
    checkpoint.train_on(case, case.model, case.optimizer, case.inputs[: spec.steps])
    buffer = io.BytesIO()
    torch.save({"m": case.model.state_dict(), "o": case.optimizer.state_dict()}, buffer)
    fresh = build_case({**longer, "seed": spec.seed + 1})
    loaded = torch.load(io.BytesIO(buffer.getvalue()))
    fresh.model.load_state_dict(loaded["m"])
    fresh.optimizer.load_state_dict(loaded["o"])
    expected = checkpoint.uninterrupted(spec)
    assert isinstance(fresh.model, nn.Linear)  # the checkpoint kind's model
    momentum = fresh.optimizer.state[fresh.model.weight]["momentum_buffer"]
    assert torch.allclose(momentum, torch.tensor(expected[0]["momentum"]))
    assert bool(momentum.any())  # momentum to lose: the bug changes the training after
    for batch, state in zip(case.inputs[spec.steps :], expected[1:], strict=True):
        checkpoint.train_on(case, fresh.model, fresh.optimizer, [batch])
        assert torch.allclose(torch.tensor(flat_parameters(fresh.model)), state["parameters"])


def adam(spec: CaseSpec) -> CaseSpec:
    settings = spec.model_dump(exclude={"momentum"})
    return CaseSpec.model_validate({**settings, "optimizer": "adam", "lr": 0.01})


def test_a_resume_with_adam_is_judged_on_its_running_averages_and_step_count() -> None:
    """The optimizer's whole state is compared, not only SGD's momentum buffer: with Adam, a
    checkpoint of the model alone is optimizer-state-lost, and the right one is correct."""
    resume = exercise("resume-training")
    with_adam = resume.model_copy(update={"cases": [adam(spec) for spec in resume.cases]})
    saved = checkpoint.uninterrupted(with_adam.cases[0])[0]
    assert saved["momentum"] is None and saved["exp_avg"] is not None
    assert saved["opt_step"] == float(with_adam.cases[0].steps)
    assert judge_source(with_adam, resume.solution_code).diagnosis == "correct"
    variants = {variant.id: variant for variant in resume.variants}
    for name in ("model-only", "optimizer-not-loaded", "model-not-loaded"):
        report = judge_source(with_adam, variants[name].source)
        assert report.diagnosis == variants[name].diagnosis, (name, report.feedback)
    lost = judge_source(with_adam, variants["model-only"].source)
    failed = [check.id for check in lost.checks if not check.passed]
    assert "optimizer-restored" in failed and "model-restored" not in failed
    restored = next(check for check in lost.checks if check.id == "optimizer-restored")
    assert "holds no state" in restored.message  # said by the check, not again in the feedback


# --- through the sandbox ---------------------------------------------------------------------


def test_a_resume_without_its_save_is_a_runtime_error_naming_save(
    grading_runner: sandbox.Runner,
) -> None:
    source = "def resume(model, optimizer, state):\n    model.load_state_dict(state)\n"
    report = grade("resume-training", source, runner=grading_runner)
    assert report.diagnosis == "runtime-error" and report.score == 0
    assert "save(model, optimizer)" in report.feedback


def test_evaluation_that_switches_grad_off_for_good_is_told_and_does_not_leak() -> None:
    """Gradient recording left off would break the training that follows: it fails
    training-mode-restored, and the recorder turns it on again, so the next case is judged as
    if it were the first."""
    source = (
        "import torch\n\n"
        "def evaluate(model, loss_fn, x, y):\n"
        "    torch.set_grad_enabled(False)\n"
        "    model.eval()\n"
        "    loss = loss_fn(model(x), y).item()\n"
        "    model.train()\n"
        "    return loss\n"
    )
    report = judge_source(exercise("evaluate"), source)
    failed = [check.id for check in report.checks if not check.passed]
    assert failed == ["training-mode-restored"], report.feedback
    restored = next(check for check in report.checks if check.id == "training-mode-restored")
    assert "gradient recording was left off" in restored.message
    assert "The first check that fails is `training-mode-restored`." in report.feedback
    assert torch.is_grad_enabled()


def test_a_checkpoint_torch_load_cannot_read_with_weights_only_is_a_runtime_error_saying_so(
    grading_runner: sandbox.Runner,
) -> None:
    """The checkpoint travels as bytes read with weights_only=True: a module object in it is
    refused there, and the learner is told what to return instead."""
    source = (
        "def save(model, optimizer):\n"
        "    return {'model': model, 'optimizer': optimizer.state_dict()}\n\n"
        "def resume(model, optimizer, state):\n"
        "    model.load_state_dict(state['model'].state_dict())\n"
        "    optimizer.load_state_dict(state['optimizer'])\n"
    )
    report = grade("resume-training", source, runner=grading_runner)
    assert report.diagnosis == "runtime-error" and report.score == 0, report.feedback
    assert "weights_only=True" in report.feedback
    assert "return a dict of state dicts, tensors and numbers" in report.feedback


def test_a_resume_that_reads_the_first_resumed_pair_fails_on_the_second() -> None:
    """Each of the two fresh pairs is resumed from the same bytes; a `resume` that copies the
    state of the last model it was given (of this case's shape), not the checkpoint, fails on
    the second."""
    source = (
        "import copy\n\n"
        "GIVEN = []\n\n"
        "def save(model, optimizer):\n"
        "    return {'model': model.state_dict(), 'optimizer': optimizer.state_dict()}\n\n"
        "def resume(model, optimizer, state):\n"
        "    if GIVEN and GIVEN[-1][0].weight.shape == model.weight.shape:\n"
        "        state = {'model': GIVEN[-1][0].state_dict(),\n"
        "                 'optimizer': GIVEN[-1][1].state_dict()}\n"
        "    model.load_state_dict(state['model'])\n"
        "    optimizer.load_state_dict(state['optimizer'])\n"
        "    GIVEN.append((model, optimizer))\n"
    )
    report = judge_source(exercise("resume-training"), source)
    restored = next(check for check in report.checks if check.id == "model-restored")
    assert not restored.passed
    assert "after `resume` a second time from the same checkpoint" in restored.message


def test_eval_mode_is_decided_by_the_loss_not_by_the_forwards_seen() -> None:
    """A forward in training mode beside the right one does not cost eval-mode: the loss
    returned is the evaluation-mode loss. Its graph fails no-graph, which has no points."""
    source = (
        "import torch\n\n"
        "def evaluate(model, loss_fn, x, y):\n"
        "    print(model(x).shape)\n"
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        loss = loss_fn(model(x), y).item()\n"
        "    model.train()\n"
        "    return loss\n"
    )
    evaluate = exercise("evaluate")
    report = judge_source(evaluate, source)
    failed = [check for check in report.checks if not check.passed]
    assert [check.id for check in failed] == ["no-graph"], report.feedback
    assert failed[0].max_points == 0 and report.score == evaluate.max_score
    assert report.diagnosis == "missing-no-grad"


def test_a_schedule_whose_rates_never_moved_the_weights_earns_no_rate_points() -> None:
    """scheduler.step() where optimizer.step() belongs: the schedule's rates change, but no
    step applies them, so learning-rates fails with the weights' own words."""
    source = (
        "def train(model, optimizer, scheduler, loss_fn, batches, epochs):\n"
        "    means = []\n"
        "    for epoch in range(epochs):\n"
        "        total = 0.0\n"
        "        for x, y in batches:\n"
        "            optimizer.zero_grad()\n"
        "            loss = loss_fn(model(x), y)\n"
        "            loss.backward()\n"
        "            scheduler.step()\n"
        "            total += loss.item()\n"
        "        means.append(total / len(batches))\n"
        "    return means\n"
    )
    report = judge_source(exercise("scheduler-epochs"), source)
    rates = next(check for check in report.checks if check.id == "learning-rates")
    assert not rates.passed and rates.points == 0
    assert "the weights never moved from where they started" in rates.message
