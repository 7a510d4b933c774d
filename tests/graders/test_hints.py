"""Hints as data: every diagnosis an exercise can give has its three levels written, the words
hold no number of any case, a wrong hints file is refused naming the file and the field, and a
hint never changes an exercise's version (so it never marks results for regrade)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from graders.exercise import Exercise
from graders.exercises import EXERCISES_DIR, list_exercises, load_exercise
from graders.hints import LEVELS, HintsRefused, hint_problems, hints_for, read_hints_file
from graders.kinds import kind_of

# Every code an exercise of a stepping kind can give, besides its variants' (graders.fitting).
STEPPING_CODES = {
    "missing-zero-grad", "step-before-backward", "zero-grad-before-step", "missing-step",
    "missing-backward", "wrong-loss-scaling", "step-per-microbatch",
    "zero-grad-inside-accumulation", "backward-twice", "step-twice", "step-skipped",
    "zero-grad-skipped", "gradients-scaled", "loss-sum-not-mean", "wrong-learning-rate",
    "wrong-momentum", "loss-after-update", "loss-detached", "optimizer-recreated",
    "gradients-times-loss",
}  # fmt: skip
# What any exercise can give, whatever its kind (graders.grading, graders.diagnosis).
EVERY_EXERCISE = {
    "syntax-error", "missing-function", "wrong-return-type", "runtime-error", "timeout",
    "memory-limit", "output-limit", "non-finite-value", "incorrect", "grad-none-error",
}  # fmt: skip
STEPPING_KINDS = {"step-function", "training-loop"}


def test_the_files_as_shipped_are_sound() -> None:
    assert hint_problems(list_exercises()) == []


@pytest.mark.parametrize("exercise", list_exercises(), ids=lambda e: e.id)
def test_every_diagnosis_an_exercise_gives_has_three_levels(exercise: Exercise) -> None:
    codes = EVERY_EXERCISE | {variant.diagnosis for variant in exercise.variants}
    codes |= {record.code for record in kind_of(exercise).diagnoses}
    if exercise.kind in STEPPING_KINDS:
        codes |= STEPPING_CODES
    for code in sorted(codes):
        hints = hints_for(exercise.id, code)
        assert hints is not None, f"{exercise.id}: no hints for {code}"
        assert len(hints.levels) == len(LEVELS) and all(hints.levels)
        for text in hints.levels:
            # The same words for every case: no number at all, so none of a case, visible or
            # hidden (a zero to start a sum from is no case's). The words may name a concept
            # that is also a hidden case's id ("momentum"): that id says nothing of its numbers.
            numbers = set(re.findall(r"\d+(?:\.\d+)?", text))
            assert numbers <= {"0", "0.0"}, (exercise.id, code, text)
    assert hints_for(exercise.id, "correct") is None


def _refusal(tmp_path: Path, text: str, prompt: str | None = None) -> str:
    path = tmp_path / "hints.toml"
    path.write_text(text)
    with pytest.raises(HintsRefused) as refused:
        read_hints_file(path, prompt)
    return str(refused.value)


def test_a_wrong_file_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    three = 'where = "a"\nwhat = "b"\nfix = "c"\n'
    said = _refusal(tmp_path, f'["missing-zero-grads"]\n{three}')
    assert said.startswith(f"{tmp_path / 'hints.toml'}: [missing-zero-grads]: no such diagnosis")
    said = _refusal(tmp_path, '["missing-step"]\nwhere = "a"\nwhat = "b"\n')
    assert "[missing-step] fix: missing" in said
    said = _refusal(tmp_path, '["missing-step"]\nwhere = "a"\nwhat = " "\nfix = "c"\n')
    assert "[missing-step] what: missing" in said
    said = _refusal(tmp_path, f'["missing-step"]\n{three}solution = "d"\n')
    assert "[missing-step] solution: no such key" in said
    prompt = "# Title\n\n## Stepping {#stepping}\n"
    said = _refusal(tmp_path, f'["missing-step"]\n{three}lesson = "steps"\n', prompt)
    assert "[missing-step] lesson: 'steps' is no anchor of the prompt" in said
    path = tmp_path / "hints.toml"
    path.write_text(f'["missing-step"]\n{three}lesson = "stepping"\n')
    assert read_hints_file(path, prompt)["missing-step"].lesson == "stepping"


def test_check_exercises_names_a_wrong_file(tmp_path: Path) -> None:
    folder = tmp_path / "train-step"
    shutil.copytree(EXERCISES_DIR / "train-step", folder)
    (folder / "hints.toml").write_text('["missing-step"]\nwhere = "a"\n')
    problems = hint_problems([load_exercise(folder)])
    assert len(problems) == 1
    assert problems[0].startswith(f"{folder / 'hints.toml'}: [missing-step] what: missing")


def test_a_hint_never_changes_the_version(tmp_path: Path) -> None:
    folder = tmp_path / "train-step"
    shutil.copytree(EXERCISES_DIR / "train-step", folder)
    before = load_exercise(folder).version
    (folder / "hints.toml").write_text("# reworded\n" + (folder / "hints.toml").read_text())
    assert load_exercise(folder).version == before
    (folder / "prompt.md").write_text((folder / "prompt.md").read_text() + "\nMore.\n")
    assert load_exercise(folder).version != before  # what is graded still counts
