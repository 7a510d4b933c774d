"""A case's model and loss declared in exercise.toml (`model`, `loss`): built alike in the sandbox
and by the grader, judged over the model's named parameters, proven by check-exercises' own
proof, and said in the words with the parameter's real name."""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import sandbox
from graders import exercises, grade
from graders.exercise import CaseSpec
from graders.exercises import ExerciseRefused, load_exercise
from graders.harness import build_case, parameters_of
from graders.hints import _hints_by_exercise, hints_for
from graders.proving import prove
from graders.scaffold import _toml_value

REPO_EXERCISES = Path(__file__).resolve().parents[2] / "exercises"
MLP = 'model = {kind = "mlp", hidden = [8], activation = "relu"}\nloss = "cross-entropy"\n'
# On an MLP, a step() between the forward pass and backward() changes in place a weight that
# backward() needs: torch raises, where a linear model steps on old gradients.
RAISES_ON_AN_MLP = (
    'diagnosis = "step-before-backward"\ncalls = ["step", "zero_grad"',
    "runtime-error",
)


def as_classifier(folder: Path) -> Path:
    """Every case of the folder an MLP with cross-entropy on 3 classes (2 where it had 2)."""
    toml = folder / "exercise.toml"
    text = toml.read_text().replace("[[cases]]\n", "[[cases]]\n" + MLP)
    text = text.replace("out_features = 1\n", "out_features = 3\n")
    text = text.replace(
        RAISES_ON_AN_MLP[0],
        RAISES_ON_AN_MLP[0].replace("step-before-backward", RAISES_ON_AN_MLP[1]),
    )
    toml.write_text(text)
    return folder


def classifier(tmp_path: Path, exercise_id: str) -> Path:
    return as_classifier(
        Path(shutil.copytree(REPO_EXERCISES / exercise_id, tmp_path / exercise_id))
    )


def spec(**fields: object) -> CaseSpec:
    values: dict[str, object] = {
        "id": "c", "seed": 3, "in_features": 4, "out_features": 3, "batch_size": 5, "steps": 2,
    }  # fmt: skip
    return CaseSpec.model_validate(values | fields)


def test_an_mlp_with_cross_entropy_is_built_as_declared() -> None:
    case = build_case(
        spec(
            model={"kind": "mlp", "hidden": [8, 6], "activation": "tanh"},
            loss="cross-entropy",
            stale_grads=True,
        ).harness_spec()
    )
    assert isinstance(case.model, nn.Sequential)
    assert [type(layer) for layer in case.model] == [
        nn.Linear,
        nn.Tanh,
        nn.Linear,
        nn.Tanh,
        nn.Linear,
    ]
    assert isinstance(case.loss_fn, nn.CrossEntropyLoss)
    x, y = case.inputs[0]
    assert x.shape == (5, 4) and y.shape == (5,) and y.dtype == torch.long
    assert int(y.min()) >= 0 and int(y.max()) < 3
    record = parameters_of(case.model)
    assert list(record) == [
        "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias",
        "0.weight_grad", "0.bias_grad", "2.weight_grad", "2.bias_grad", "4.weight_grad",
        "4.bias_grad",
    ]  # fmt: skip
    assert all(record[name] is not None for name in record)  # stale gradients planted in each


def test_a_linear_case_is_built_as_before_the_setting_existed() -> None:
    """The default model draws the same numbers: existing exercises keep their cases."""
    generator = torch.Generator().manual_seed(3)
    bound = 4**-0.5
    weight = torch.empty(3, 4).uniform_(-bound, bound, generator=generator)
    case = build_case(spec().harness_spec())
    assert isinstance(case.model, nn.Linear) and isinstance(case.loss_fn, nn.MSELoss)
    assert torch.equal(case.model.weight.detach(), weight)


@pytest.mark.parametrize(
    "fields, said",
    [
        ({"model": {"kind": "mlp"}}, "an mlp needs hidden widths"),
        ({"model": {"kind": "linear", "hidden": [4]}}, "a linear model has no hidden layers"),
        (
            {"model": {"kind": "mlp", "hidden": [64, 64]}, "in_features": 64},
            "parameters, more than",
        ),
        ({"loss": "cross-entropy", "out_features": 1}, "cross-entropy needs out_features"),
        ({"model": {"kind": "linear", "dropout": 0.5}}, "a linear model has no"),
        ({"model": {"kind": "mlp", "hidden": [4], "dropout": 1.0}}, "dropout"),
    ],
)
def test_a_model_the_grader_cannot_build_is_refused(
    tmp_path: Path, fields: dict[str, object], said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        spec(**fields)


def test_a_declared_model_refuses_the_folder_when_it_is_wrong(tmp_path: Path) -> None:
    folder = Path(shutil.copytree(REPO_EXERCISES / "train-step", tmp_path / "train-step"))
    toml = folder / "exercise.toml"
    toml.write_text(
        toml.read_text().replace("[[cases]]\n", '[[cases]]\nmodel = {kind = "cnn"}\n', 1)
    )
    with pytest.raises(ExerciseRefused, match=r"cases\.0\.model\.kind"):
        load_exercise(folder)


@pytest.mark.parametrize("exercise_id", ["train-step", "fix-the-loop", "clip-gradients"])
def test_check_exercises_proves_a_classifier_of_each_stepping_kind(
    tmp_path: Path, exercise_id: str
) -> None:
    """The reference, the starter, every known bug (diagnosed as declared) and every mutant of
    the reference, on MLP + cross-entropy cases: the proof the server and check-exercises run."""
    exercise = load_exercise(classifier(tmp_path, exercise_id))
    assert all(case.model.kind == "mlp" and case.loss == "cross-entropy" for case in exercise.cases)
    assert prove(exercise) == []


@pytest.fixture
def classifiers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    copy = tmp_path / "exercises"
    classifier(copy, "train-step")
    monkeypatch.setattr(exercises, "EXERCISES_DIR", copy)
    exercises._loaded.cache_clear()
    yield copy
    exercises._loaded.cache_clear()


def test_a_bug_on_a_classifier_is_told_with_the_parameter_s_real_name(
    classifiers: Path, grading_runner: sandbox.Runner
) -> None:
    """Graded in the sandbox: the words name `0.weight[i][j]`, a parameter the model has."""
    source = (classifiers / "train-step" / "bugs" / "no_zero_grad.py").read_text()
    report = grade("train-step", source, runner=grading_runner)
    assert report.diagnosis == "missing-zero-grad"
    weights = next(c for c in report.checks if c.id == "weights-match")
    assert not weights.passed and "`0.weight[" in weights.message, weights.message
    assert "`weight[" not in weights.message
    correct = (classifiers / "train-step" / "solution.py").read_text()
    assert grade("train-step", correct, runner=grading_runner).diagnosis == "correct"


SUMMED_LOSS = """def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y) * len(x)
    loss.backward()
    optimizer.step()
    return loss.item() / len(x)
"""


def test_a_summed_loss_on_a_classifier_names_no_mse_loss(
    classifiers: Path, grading_runner: sandbox.Runner
) -> None:
    """A cross-entropy exercise is told of its loss_fn in words true of it: the feedback, every
    check's message and every hint of the diagnosis name no `nn.MSELoss()`."""
    _hints_by_exercise.cache_clear()
    try:
        report = grade("train-step", SUMMED_LOSS, runner=grading_runner)
        hints = hints_for("train-step", report.diagnosis)
    finally:
        _hints_by_exercise.cache_clear()
    assert report.diagnosis == "loss-sum-not-mean", report.feedback
    assert hints is not None
    said = [report.feedback, *(c.message for c in report.checks), *hints.levels]
    assert "averages" in report.feedback
    assert not [words for words in said if "MSELoss" in words]


def test_a_declared_model_is_written_back_as_toml_by_the_scaffold() -> None:
    """`exercises new --kind` writes the cases of an exercise of that kind: a model as a table."""
    case = spec(model={"kind": "mlp", "hidden": [4], "activation": "tanh"}, loss="cross-entropy")
    written = "\n".join(
        f"{key} = {_toml_value(value)}"
        for key, value in case.model_dump(exclude_defaults=True, exclude={"hidden"}).items()
    )
    assert 'model = {kind = "mlp", hidden = [4], activation = "tanh"}' in written
    assert CaseSpec.model_validate(tomllib.loads(written)) == case


# The kinds beside step-function and training-loop that read a declared model and loss: an
# exercise of each, as a classifier (evaluation's with the dropout only it reads).
EXTENDED = [
    "prove-accumulation",
    "grad-magnitude",
    "scheduler-epochs",
    "resume-training",
    "evaluate",
]
WITH_DROPOUT = 'model = {kind = "mlp", hidden = [8], activation = "relu", dropout = 0.5}'


def declared_classifier(folder: Path, model: str = "", loss: str = "cross-entropy") -> Path:
    """A copy of an exercise of an extended kind with every case declaring `model` (an MLP by
    default, with dropout for `evaluate`) and `loss`, on 3 outputs (classes); the code reaching
    the weight reaches the first layer's (`model[0].weight`) when the model is an mlp, and
    `evaluate`'s own model's settings give way to the declared model's."""
    toml = folder / "exercise.toml"
    text = "".join(
        line
        for line in toml.read_text().splitlines(keepends=True)
        if not line.startswith(("hidden_features = ", "dropout = "))
    )
    model = model or (WITH_DROPOUT if 'kind = "evaluation"' in text else MLP.splitlines()[0])
    text = text.replace("[[cases]]\n", f'[[cases]]\n{model}\nloss = "{loss}"\n')
    toml.write_text(text.replace("out_features = 1\n", "out_features = 3\n"))
    if '"mlp"' in model:
        for source in [*folder.glob("*.py"), *folder.glob("bugs/*.py")]:
            source.write_text(source.read_text().replace("model.weight", "model[0].weight"))
    return folder


# Other combinations than an MLP with cross-entropy, on the kinds quickest to prove.
COMBINATIONS = [
    ("grad-magnitude", 'model = {kind = "mlp", hidden = [8, 6], activation = "tanh"}', "mse"),
    (
        "evaluate",
        'model = {kind = "mlp", hidden = [8, 6], activation = "sigmoid", dropout = 0.3}',
        "mse",
    ),
    ("prove-accumulation", 'model = {kind = "linear"}', "cross-entropy"),
]


@pytest.mark.parametrize("exercise_id, model, loss", COMBINATIONS)
def test_check_exercises_proves_other_declared_combinations(
    tmp_path: Path, exercise_id: str, model: str, loss: str
) -> None:
    folder = Path(shutil.copytree(REPO_EXERCISES / exercise_id, tmp_path / exercise_id))
    exercise = load_exercise(declared_classifier(folder, model, loss))
    assert all(case.loss == loss for case in exercise.cases)
    assert prove(exercise) == []


@pytest.mark.parametrize("exercise_id", EXTENDED)
def test_check_exercises_proves_a_classifier_of_each_extended_kind(
    tmp_path: Path, exercise_id: str
) -> None:
    """The proof the server and check-exercises run (reference, starter, every known bug as
    declared, every mutant), on MLP + cross-entropy cases of each kind that reads them."""
    folder = Path(shutil.copytree(REPO_EXERCISES / exercise_id, tmp_path / exercise_id))
    exercise = load_exercise(declared_classifier(folder))
    assert all(case.model.kind == "mlp" and case.loss == "cross-entropy" for case in exercise.cases)
    assert (exercise.kind == "evaluation") == all(case.model.dropout for case in exercise.cases)
    assert prove(exercise) == []


# For each extended kind: a known bug, its diagnosis, the check whose words name a parameter
# of the declared model (None: the kind's words name none), and that name as it is said.
GRADED_BUGS = {
    "prove-accumulation": ("no_clone.py", "returns-live-gradient", "copies", "`model[0].weight"),
    "grad-magnitude": ("clears_gradients.py", "modifies-gradients", "grads-unchanged", "`0.weight"),
    "scheduler-epochs": ("per_batch.py", "scheduler-per-batch", "epoch-weights-match", "`0."),
    "resume-training": (
        "model_not_loaded.py",
        "model-not-restored",
        "model-restored",
        "`0.weight[",
    ),
    "evaluate": ("no_eval.py", "missing-eval", None, ""),
}


@pytest.fixture(scope="module")
def declared_classifiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    copy = tmp_path_factory.mktemp("classifiers")
    for exercise_id in EXTENDED:
        declared_classifier(Path(shutil.copytree(REPO_EXERCISES / exercise_id, copy / exercise_id)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exercises, "EXERCISES_DIR", copy)
        exercises._loaded.cache_clear()
        yield copy
    exercises._loaded.cache_clear()


@pytest.mark.parametrize("exercise_id", EXTENDED)
def test_a_classifier_of_each_extended_kind_is_graded_in_the_sandbox(
    declared_classifiers: Path, grading_runner: sandbox.Runner, exercise_id: str
) -> None:
    """The reference scores full marks; a known bug gets its diagnosis, and the words name a
    parameter the declared model has (`0.weight[i][j]`, `model[0].weight`), never `weight`
    alone, which it has not."""
    folder = declared_classifiers / exercise_id
    correct = grade(exercise_id, (folder / "solution.py").read_text(), runner=grading_runner)
    assert (correct.diagnosis, correct.score) == ("correct", correct.max_score), correct.feedback
    bug, diagnosis, check_id, name = GRADED_BUGS[exercise_id]
    report = grade(exercise_id, (folder / "bugs" / bug).read_text(), runner=grading_runner)
    assert report.diagnosis == diagnosis, report.feedback
    assert report.score < report.max_score
    said = [report.feedback, *(check.message for check in report.checks)]
    assert not [words for words in said if "`weight[" in words or "`model.weight" in words]
    if check_id is not None:
        message = next(c.message for c in report.checks if c.id == check_id)
        assert name in message, message
