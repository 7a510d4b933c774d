"""The trust boundary at the exercise's configuration: a folder the grader cannot judge is
refused when exercises load (one line: file, field, what to do) while the others load, and a
fault of the exercise or the grader is `GraderFault`, never the learner's score."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox
from graders import exercises, grade, grade_by_id, proving
from graders.cli import check_exercises
from graders.exercise import Exercise
from graders.exercises import get_exercise, list_exercises, loaded_exercises, refused_exercises
from graders.grading import GraderFault
from graders.kinds import KINDS, step_function
from tests.app.conftest import CORRECT_CODE
from tests.graders.conftest import SHARED_LIMITS

REPO_EXERCISES = Path(__file__).resolve().parents[2] / "exercises"
ALL_IDS = [e.id for e in list_exercises()]


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the exercises, loaded instead of the repository's."""
    copy = tmp_path / "exercises"
    shutil.copytree(REPO_EXERCISES, copy)
    monkeypatch.setattr(exercises, "EXERCISES_DIR", copy)
    exercises._loaded.cache_clear()
    yield copy
    exercises._loaded.cache_clear()


def edit(folder: Path, old: str, new: str) -> None:
    toml = folder / "exercise.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new, 1))


def test_an_unknown_check_refuses_its_folder_only(folders: Path) -> None:
    edit(folders / "train-step", "weights-match = 3", "weights-matches = 3")
    (reason,) = refused_exercises().values()
    assert list(refused_exercises()) == ["train-step"]
    assert "\n" not in reason
    assert str(folders / "train-step" / "exercise.toml") in reason
    assert "checks: 'weights-matches' is no check of kind 'step-function'" in reason
    assert "use one of" in reason and "weights-match" in reason
    assert [e.id for e in list_exercises()] == [e for e in ALL_IDS if e != "train-step"]


def test_an_unknown_diagnosis_code_refuses_its_folder(folders: Path) -> None:
    edit(folders / "train-step", 'diagnosis = "missing-zero-grad"', 'diagnosis = "no-zero-grad"')
    (reason,) = refused_exercises().values()
    assert "\n" not in reason and "variants.0.diagnosis" in reason, reason
    assert len(list_exercises()) == len(ALL_IDS) - 1


def test_an_unknown_key_refuses_its_folder_instead_of_being_dropped(folders: Path) -> None:
    """An L1 loss asked for in a key the grader does not know would grade against MSE."""
    edit(folders / "train-step", 'kind = "step-function"', 'kind = "step-function"\nloss = "l1"')
    assert list(refused_exercises()) == ["train-step"]
    reason = refused_exercises()["train-step"]
    assert reason.startswith(f"{folders / 'train-step' / 'exercise.toml'}: 'loss': no such key")
    assert "remove it" in reason and "\n" not in reason
    assert len(list_exercises()) == len(ALL_IDS) - 1


def test_an_unknown_key_in_a_case_refuses_its_folder(folders: Path) -> None:
    # A warm-up asked for in a case: no case takes one, so it must not be silently dropped.
    edit(folders / "train-step", "lr = 0.1\n", "lr = 0.1\nwarmup_steps = 2\n")
    reason = refused_exercises()["train-step"]
    assert "cases.0.warmup_steps: Extra inputs are not permitted" in reason, reason


def test_a_loss_no_case_takes_refuses_its_folder(folders: Path) -> None:
    edit(folders / "train-step", "lr = 0.1\n", 'lr = 0.1\nloss = "l1"\n')
    reason = refused_exercises()["train-step"]
    assert "cases.0.loss: Input should be 'mse' or 'cross-entropy'" in reason, reason


def test_two_folders_with_one_id_load_one_and_refuse_the_other(folders: Path) -> None:
    shutil.copytree(folders / "train-step", folders / "train-step-copy")
    assert list(refused_exercises()) == ["train-step-copy"]
    reason = refused_exercises()["train-step-copy"]
    assert "id: 'train-step' is taken by the folder 'train-step': give it another" in reason
    assert [e.id for e in list_exercises()] == ALL_IDS
    assert get_exercise("train-step").folder == str(folders / "train-step")


def test_a_change_of_the_kind_module_is_a_new_version(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Results graded by the old judge are marked for regrade: the version covers its code.
    (The folders as they load: the proof of a new version is not the point here.)"""
    before = {e.id: e.version for e in loaded_exercises()[0]}
    module = sys.modules[step_function.__name__]
    changed = tmp_path / "step_function.py"
    changed.write_text(Path(str(module.__file__)).read_text() + "\nJUDGED_DIFFERENTLY = True\n")
    monkeypatch.setattr(module, "__file__", str(changed))
    exercises._loaded.cache_clear()
    after = {e.id: e.version for e in loaded_exercises()[0]}
    stepping = {e.id for e in loaded_exercises()[0] if e.kind == "step-function"}
    assert {"train-step", "accumulate-microbatches"} <= stepping < set(before)
    assert {id_ for id_ in before if before[id_] != after[id_]} == stepping


def test_a_change_of_a_shared_judging_module_is_a_new_version_of_every_exercise(
    folders: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay, the fitting, the harness... judge every exercise: a change of one marks every
    result for regrade; a change of the command line (no part of a grade) marks none."""
    before = {e.id: e.version for e in loaded_exercises()[0]}
    copy = tmp_path / "graders"
    copy.mkdir()
    for path in exercises.GRADERS_DIR.glob("*.py"):
        shutil.copy(path, copy / path.name)
    monkeypatch.setattr(exercises, "GRADERS_DIR", copy)
    (copy / "cli.py").write_text((copy / "cli.py").read_text() + "\n# said differently\n")
    exercises._loaded.cache_clear()
    assert {e.id: e.version for e in loaded_exercises()[0]} == before
    (copy / "replay.py").write_text(
        (copy / "replay.py").read_text() + "\nJUDGED_DIFFERENTLY = True\n"
    )
    exercises._loaded.cache_clear()
    after = {e.id: e.version for e in loaded_exercises()[0]}
    assert after.keys() == before.keys() == set(ALL_IDS)
    assert all(after[id_] != before[id_] for id_ in before)


def test_a_kind_not_registered_refuses_its_folders(
    folders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(KINDS, "gradient-reading")
    assert list(refused_exercises()) == ["grad-magnitude"]
    reason = refused_exercises()["grad-magnitude"]
    assert "kind: 'gradient-reading' is no kind: use one of" in reason, reason
    assert "step-function" in reason
    assert "grad-magnitude" not in [e.id for e in list_exercises()]


def test_a_fault_of_the_exercise_is_the_grader_s_not_the_learner_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A check its kind does not make, as a folder changed after it was loaded would have.
    exercise = get_exercise("train-step")
    broken = exercise.model_copy(update={"checks": {**exercise.checks, "no-such-check": 1.0}})
    monkeypatch.setattr(grade_by_id, "get_exercise", lambda _id: broken)
    runner = sandbox.open_runner("bwrap")
    try:
        with pytest.raises(GraderFault, match="cannot judge its own reference: KeyError"):
            grade("train-step", CORRECT_CODE, SHARED_LIMITS, runner)
    finally:
        runner.close()


# A setting of each kind's own, on a case of a kind that does not read it.
SETTING_OF_ANOTHER_KIND = {
    "step-function": ("train-step", "epochs = 2"),
    "training-loop": ("fix-the-loop", "max_norm = 0.5"),
    "gradient-pair": ("prove-accumulation", 'grad_state = "none"'),
    "gradient-reading": ("grad-magnitude", "hidden_features = 16"),
    "epoch-loop": ("scheduler-epochs", "dropout = 0.3"),
    "evaluation": ("evaluate", "lr_gamma = 0.1"),
    "checkpoint": ("resume-training", "micro_batches = 2"),
    "optimizer-by-hand": ("sgd-momentum-by-hand", "examples = 10"),
    "dataloader-epoch": ("mlp-epoch", "max_norm = 0.5"),
    "patience-fit": ("early-stopping", "examples = 10"),
    "mixed-precision-step": ("amp-clip-step", "patience = 2"),
}


def test_every_kind_is_tried_with_a_setting_of_another() -> None:
    assert set(SETTING_OF_ANOTHER_KIND) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(SETTING_OF_ANOTHER_KIND))
def test_a_setting_the_kind_does_not_read_refuses_the_folder_with_the_kind(
    folders: Path, kind: str
) -> None:
    """Silently ignored, it would grade a case other than the one its author declared."""
    folder, setting = SETTING_OF_ANOTHER_KIND[kind]
    toml = folders / folder / "exercise.toml"
    assert f'kind = "{kind}"' in toml.read_text()
    toml.write_text(toml.read_text().replace("[[cases]]\n", f"[[cases]]\n{setting}\n", 1))
    reason = refused_exercises()[folder]
    name = setting.split(" = ")[0]
    assert f"{name!r}: kind {kind!r} does not read it" in reason, reason
    assert "remove it" in reason and "\n" not in reason
    assert folder not in {e.id for e in list_exercises()}


# The model and loss a case may declare, on each kind that builds its own (or none).
FIXED_MODEL = {
    "optimizer-by-hand": ("sgd-momentum-by-hand", 'model = {kind = "mlp", hidden = [4]}'),
    "dataloader-epoch": ("mlp-epoch", 'loss = "mse"'),
    "patience-fit": ("early-stopping", 'model = {kind = "mlp", hidden = [4]}'),
    "mixed-precision-step": ("amp-clip-step", 'loss = "mse"'),
}


def test_the_kinds_that_fix_their_model_are_those_that_read_no_model() -> None:
    fixed = {name for name, kind in KINDS.items() if "model" not in kind.case_settings}
    assert fixed == set(FIXED_MODEL)
    assert all("loss" not in KINDS[name].case_settings for name in fixed)


@pytest.mark.parametrize("kind", sorted(FIXED_MODEL))
def test_a_model_or_loss_on_a_kind_with_its_own_refuses_the_folder(
    folders: Path, kind: str
) -> None:
    folder, setting = FIXED_MODEL[kind]
    toml = folders / folder / "exercise.toml"
    toml.write_text(toml.read_text().replace("[[cases]]\n", f"[[cases]]\n{setting}\n", 1))
    reason = refused_exercises()[folder]
    name = setting.split(" = ")[0]
    assert f"{name!r}: kind {kind!r} does not read it" in reason, reason


def test_a_folder_whose_reference_the_proof_refuses_is_not_served(folders: Path) -> None:
    """A reference without zero_grad defines wrong numbers as right: graded against, a correct
    submission would fail and the bug pass. The server refuses it as check-exercises does."""
    solution = folders / "train-step" / "solution.py"
    solution.write_text(solution.read_text().replace("    optimizer.zero_grad()\n", ""))
    assert "zero_grad" not in solution.read_text()
    reason = refused_exercises()["train-step"]
    assert reason.startswith(f"{folders / 'train-step'}: not served, unsound ("), reason
    assert "the reference solution scores" in reason and "\n" not in reason
    assert "check-exercises" in reason
    assert "train-step" not in {e.id for e in list_exercises()}
    with pytest.raises(exercises.UnknownExercise):
        grade("train-step", CORRECT_CODE)


def test_check_exercises_counts_every_problem_and_names_a_shared_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exercise missing its `correct` words is not `ok`, its count is the lines said under
    it, and two exercises at one place are named (the default order between them a guess)."""
    copy = tmp_path / "exercises"
    shutil.copytree(REPO_EXERCISES / "train-step", copy / "train-step")
    shutil.copytree(REPO_EXERCISES / "train-step", copy / "train-step-again")
    toml = copy / "train-step-again" / "exercise.toml"
    text = toml.read_text().replace('id = "train-step"', 'id = "train-step-again"', 1)
    toml.write_text("\n".join(line for line in text.splitlines() if not line.startswith("correct")))
    monkeypatch.setattr(exercises, "EXERCISES_DIR", copy)
    assert check_exercises() == 1
    said = capsys.readouterr().out
    position = get_exercise("train-step").position
    assert f"{position}. train-step (" in said and ": ok\n" in said
    assert f"{position}. train-step-again (" in said and "): 1 problem(s)\n" in said, said
    problems = [line for line in said.splitlines() if line.startswith("  - ")]
    assert len(problems) == 2, said

    # A problem of its hints file is counted on the exercise's own line too.
    hints = copy / "train-step-again" / "hints.toml"
    hints.write_text(hints.read_text() + '\n["missing-zero-grad"]\nlesson = "x"\n')
    assert check_exercises() == 1
    said = capsys.readouterr().out
    assert f"{position}. train-step-again (" in said and "): 2 problem(s)\n" in said, said
    problems = [line for line in said.splitlines() if line.startswith("  - ")]
    assert len(problems) == 3, said
    assert any(line.startswith("  - hints: ") for line in problems), said
    assert f"{copy / 'train-step-again'}/exercise.toml: correct: missing" in said
    assert (
        f"position {position}: {copy / 'train-step'} and {copy / 'train-step-again'} share it"
        in said
    )


def test_a_proof_that_stops_refuses_its_folder_not_the_server(
    folders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = proving.proven_problems

    def stopping(exercise: Exercise) -> list[str]:
        if exercise.id == "train-step":
            raise RuntimeError("the proof broke\non two lines")
        return original(exercise)

    monkeypatch.setattr(exercises, "proven_problems", stopping)
    reason = refused_exercises()["train-step"]
    assert reason.endswith(
        "train-step: the proof stopped: RuntimeError: the proof broke on two lines"
    )
    assert [e.id for e in list_exercises()] == [e for e in ALL_IDS if e != "train-step"]


# The kinds that read a declared model but cannot judge one with dropout: its masks are random.
NO_DROPOUT = {
    "step-function": "train-step",
    "training-loop": "fix-the-loop",
    "gradient-pair": "prove-accumulation",
    "gradient-reading": "grad-magnitude",
    "epoch-loop": "scheduler-epochs",
    "checkpoint": "resume-training",
}


def test_the_kinds_that_refuse_dropout_are_those_that_read_a_model_but_not_it() -> None:
    refusing = {
        name
        for name, kind in KINDS.items()
        if "model" in kind.case_settings and "model.dropout" not in kind.case_settings
    }
    assert refusing == set(NO_DROPOUT)


@pytest.mark.parametrize("kind", sorted(NO_DROPOUT))
def test_a_model_with_dropout_refuses_the_folder_of_a_kind_that_cannot_judge_it(
    folders: Path, kind: str
) -> None:
    """Its masks are random draws the grader cannot recompute: said, with the kind's name."""
    folder = NO_DROPOUT[kind]
    toml = folders / folder / "exercise.toml"
    model = 'model = {kind = "mlp", hidden = [4], dropout = 0.5}'
    toml.write_text(toml.read_text().replace("[[cases]]\n", f"[[cases]]\n{model}\n", 1))
    reason = refused_exercises()[folder]
    assert f"model: dropout: kind {kind!r} cannot judge a model with dropout" in reason, reason
    assert "random draws" in reason and "\n" not in reason


@pytest.mark.parametrize(
    "setting, said",
    [
        ('model = {kind = "mlp", hidden = [4]}', "needs a model with dropout"),
        ('model = {kind = "linear"}', "needs a model with dropout"),
        ('loss = "mse"', "reads a loss with a declared model only"),
        (
            'model = {kind = "mlp", hidden = [4], dropout = 0.5}\nhidden_features = 4',
            "'hidden_features': the settings of kind 'evaluation''s own model",
        ),
    ],
)
def test_an_evaluation_case_refuses_a_model_whose_evaluation_nothing_shows(
    folders: Path, setting: str, said: str
) -> None:
    """Without dropout, evaluation mode changes nothing a check could see."""
    toml = folders / "evaluate" / "exercise.toml"
    toml.write_text(toml.read_text().replace("[[cases]]\n", f"[[cases]]\n{setting}\n", 1))
    reason = refused_exercises()["evaluate"]
    assert "kind 'evaluation'" in reason or "'evaluation''s" in reason, reason
    assert said in reason, reason
