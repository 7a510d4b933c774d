"""The optimizer a case declares (graders/optimizers.py), its state judged, and the second unit's
optimizer exercises (adam-step, clip-gradients) graded through the warm pool."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import sandbox
from graders import grade
from graders.exercise import CaseSpec
from graders.exercises import EXERCISES_DIR, ExerciseRefused, get_exercise, load_exercise
from graders.grading import trusted_trajectories
from graders.harness import build_case, optimizer_state
from graders.judging import batch_of, case_data, loss_and_gradients
from graders.kinds.step_function import judge_case, one_step
from graders.optimizers import declared_optimizer
from graders.proving import judge_source
from graders.sentences import Said, words_of
from tests.graders.conftest import SHARED_LIMITS


def case(**fields: Any) -> CaseSpec:
    return CaseSpec(id="c", seed=4, in_features=3, out_features=2, batch_size=5, steps=3, **fields)


def refusal(tmp_path: Path, old: str, new: str) -> str:
    folder = tmp_path / "adam-step"
    shutil.copytree(EXERCISES_DIR / "adam-step", folder)
    toml = folder / "exercise.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new, 1))
    with pytest.raises(ExerciseRefused) as refused:
        load_exercise(folder)
    assert "\n" not in str(refused.value)
    assert str(toml) in str(refused.value)
    return str(refused.value)


def test_an_unknown_optimizer_is_refused_naming_the_file_and_the_field(tmp_path: Path) -> None:
    reason = refusal(tmp_path, 'optimizer = "adam"', 'optimizer = "rmsprop"')
    assert "cases.0.optimizer" in reason
    assert "'sgd', 'adam' or 'adamw'" in reason


def test_a_setting_the_optimizer_does_not_take_is_refused(tmp_path: Path) -> None:
    reason = refusal(tmp_path, "lr = 0.05\n", "lr = 0.05\nmomentum = 0.9\n")
    assert "momentum: not a setting of optimizer 'adam'" in reason


def test_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    reason = refusal(tmp_path, "lr = 0.05\n", "lr = 0.05\nbeta1 = 0.9\n")
    assert "cases.0.beta1" in reason


# Each declaration, and the optimizer torch builds from the same settings by hand.
DECLARED = [
    ({}, lambda p: torch.optim.SGD(p, lr=0.1)),
    (
        {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    ),
    (
        {"momentum": 0.8, "nesterov": True},
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.8, nesterov=True),
    ),
    ({"optimizer": "adam", "lr": 0.01}, lambda p: torch.optim.Adam(p, lr=0.01)),
    (
        {"optimizer": "adam", "betas": (0.8, 0.99), "eps": 1e-6, "amsgrad": True},
        lambda p: torch.optim.Adam(p, lr=0.1, betas=(0.8, 0.99), eps=1e-6, amsgrad=True),
    ),
    (
        {"optimizer": "adamw", "lr": 0.02, "weight_decay": 0.1},
        lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.1),
    ),
    # AdamW's weight decay is 0 unless declared (torch's default is 0.01).
    ({"optimizer": "adamw"}, lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.0)),
]


@pytest.mark.parametrize(("fields", "by_hand"), DECLARED, ids=lambda v: str(v))
def test_each_declared_optimizer_steps_as_torch_does(fields: dict[str, Any], by_hand: Any) -> None:
    spec = case(**fields)
    data = case_data(spec)
    ours = [data.weight.clone(), data.bias.clone()]
    theirs = [data.weight.clone(), data.bias.clone()]
    declared, torchs = declared_optimizer(spec, ours), by_hand(theirs)
    # The sandbox builds the same optimizer from the spec it is sent.
    assert type(build_case(spec.harness_spec()).optimizer) is type(torchs)
    for given in data.inputs:
        x, y = batch_of(given)
        for parameters, optimizer in ((ours, declared), (theirs, torchs)):
            weight, bias = parameters
            gradients = loss_and_gradients(spec, {"weight": weight, "bias": bias}, x, y)[1]
            weight.grad, bias.grad = gradients["weight"], gradients["bias"]
            optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert not torch.equal(ours[0], data.weight)


@pytest.mark.parametrize(("fields", "by_hand"), DECLARED, ids=lambda v: str(v))
def test_one_step_from_a_recorded_state_is_the_optimizers_next_step(
    fields: dict[str, Any], by_hand: Any
) -> None:
    """The local judge's step: a fresh optimizer loaded with the state recorded after call 1,
    stepped on call 2's gradient, moves the weight as the optimizer that made call 1 does."""
    spec = case(**fields)
    data = case_data(spec)
    weight, bias = data.weight.clone(), data.bias.clone()
    optimizer = by_hand([weight, bias])
    gradients = loss_and_gradients(spec, data.parameters, *batch_of(data.inputs[0]))[1]
    weight.grad, bias.grad = gradients["weight"], gradients["bias"]
    optimizer.step()
    state = optimizer_state(optimizer, weight)
    before = {"weight": weight.clone(), "bias": bias.clone()}
    gradients = loss_and_gradients(spec, before, *batch_of(data.inputs[1]))[1]
    weight.grad, bias.grad = gradients["weight"], gradients["bias"]
    optimizer.step()
    judged = one_step(spec, before, gradients, state)
    assert torch.allclose(judged["weight"], weight, rtol=1e-6, atol=1e-7)


def test_a_mistake_seen_only_in_the_optimizers_state_fails_optimizer_state() -> None:
    """Weights as the reference's after every call, Adam's exp_avg not: only the state shows it."""
    exercise = get_exercise("adam-step")
    spec = exercise.cases[0]
    reference = trusted_trajectories(exercise)["reference"][spec.id]
    records = [dict(record) for record in reference.records]
    records[-1]["exp_avg"] = [[value * 0.5 for value in row] for row in records[-1]["exp_avg"]]
    learner = reference.model_copy(update={"records": records})
    findings = judge_case(spec, learner, reference)
    assert set(findings.failures) == {"optimizer-state"}
    said = findings.failures["optimizer-state"]
    assert isinstance(said, Said)
    assert "`exp_avg` (the running mean of the gradients) differs" in words_of(said)
    assert judge_case(spec, reference, reference).failures == {}


def test_clipping_bites_on_every_call_of_every_clip_gradients_case() -> None:
    """The reference's gradient on every call is longer than max_norm, visible and hidden cases
    alike: without that, not clipping would go unseen."""
    exercise = get_exercise("clip-gradients")
    reference = trusted_trajectories(exercise)["reference"]
    assert {spec.hidden for spec in exercise.cases} == {False, True}
    for spec in exercise.cases:
        assert spec.max_norm is not None
        data = case_data(spec)
        parameters = data.parameters
        for given, record in zip(data.inputs, reference[spec.id].records, strict=True):
            gradients = loss_and_gradients(spec, parameters, *batch_of(given))[1]
            norm = torch.cat([gradient.flatten() for gradient in gradients.values()]).norm()
            assert norm > 1.5 * spec.max_norm, (spec.id, float(norm))
            parameters = {name: torch.tensor(record[name]) for name in parameters}


SECOND_UNIT = ["adam-step", "clip-gradients"]


def expected_diagnoses() -> list[tuple[str, str, str, str]]:
    """(exercise, name, source, diagnosis) of each solution, starter and declared bug."""
    found = []
    for exercise_id in SECOND_UNIT:
        exercise = get_exercise(exercise_id)
        found.append((exercise_id, "solution", exercise.solution_code, "correct"))
        found.append((exercise_id, "starter", exercise.starter_code, "not-started"))
        found += [(exercise_id, v.id, v.source, v.diagnosis) for v in exercise.variants]
    return found


@pytest.mark.parametrize(
    ("exercise_id", "name", "source", "diagnosis"),
    expected_diagnoses(),
    ids=[f"{e}/{n}" for e, n, _, _ in expected_diagnoses()],
)
def test_the_second_units_bugs_are_named_in_the_warm_pool(
    exercise_id: str,
    name: str,
    source: str,
    diagnosis: str,
    grading_runner: sandbox.Runner,
) -> None:
    # test_pool_grades.py holds the pool's reports to cold sandboxes'.
    assert isinstance(grading_runner, sandbox.PoolRunner), grading_runner.status
    warm = grade(exercise_id, source, SHARED_LIMITS, grading_runner)
    assert warm.diagnosis == diagnosis, warm.feedback
    exercise = get_exercise(exercise_id)
    assert (warm.score == exercise.max_score) == (diagnosis == "correct")
    if diagnosis == "correct":  # praised for what this exercise asks, not for a training loop
        assert exercise.correct in warm.feedback
    if diagnosis == "not-started":
        assert warm.score == 0


def test_an_adam_built_anew_every_call_is_optimizer_recreated() -> None:
    """Every update is a new Adam's first step (its averages and step count start again), not
    the given Adam's: the model of a state that starts again fits, and the harness saw an
    optimizer made of the weight, so it is named optimizer-recreated, with words true of Adam."""
    source = (
        "import torch\n\n"
        "def train_step(model, optimizer, loss_fn, x, y):\n"
        "    mine = torch.optim.Adam(model.parameters(), lr=optimizer.param_groups[0]['lr'])\n"
        "    mine.zero_grad()\n"
        "    loss = loss_fn(model(x), y)\n"
        "    loss.backward()\n"
        "    mine.step()\n"
        "    return loss.item()\n"
    )
    report = judge_source(get_exercise("adam-step"), source)
    assert report.diagnosis == "optimizer-recreated", report.feedback
    assert "Adam's running averages and step count" in report.feedback
    assert "plain SGD" not in report.feedback


def test_a_momentum_buffer_that_differs_is_said_in_one_phrase() -> None:
    """SGD's momentum buffer halved after the last call: "the optimizer's momentum buffer"."""
    exercise = get_exercise("clip-gradients")
    spec = next(case for case in exercise.cases if case.momentum)
    reference = trusted_trajectories(exercise)["reference"][spec.id]
    records = [dict(record) for record in reference.records]
    records[-1]["momentum"] = [[value * 0.5 for value in row] for row in records[-1]["momentum"]]
    learner = reference.model_copy(update={"records": records})
    failure = judge_case(spec, learner, reference).failures["optimizer-state"]
    assert isinstance(failure, Said)
    said = words_of(failure)
    assert "the optimizer's momentum buffer differs" in said
    assert "the optimizer's the" not in said
