"""`loopgrade exercises new ID --like OTHER`: a copy of a working exercise (its cases, bugs and
hints) under a new id, to change; `loopgrade exercises new ID --kind K`: a folder that loads,
for its author to fill in. `check-exercises` then says what is left.

`--like` takes an exercise of the folder, or one of the built-ins (the repository's
`exercises/`) when the folder has none of that id. `--kind` starts from the first exercise of
that kind (its function, signature and cases: what that kind's harness calls), the built-ins'
when the folder has none.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from graders.exercise import Exercise
from graders.exercises import ExerciseRefused, load_exercise, loaded_exercises

EXERCISE_ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
MAX_ID_CHARS = 100  # Submission.exercise_id


# The exercises that come with the code: what a folder of one's own may start from.
BUILT_IN_DIR = Path(__file__).resolve().parent.parent / "exercises"


class ScaffoldRefused(ValueError):
    """The folder cannot be made; the message is one line."""


def built_in_exercises() -> list[Exercise]:
    """The repository's exercises that load, in their order."""
    built_in = []
    for toml in sorted(BUILT_IN_DIR.glob("*/exercise.toml")):
        try:
            built_in.append(load_exercise(toml.parent))
        except ExerciseRefused:
            continue  # a broken built-in is no start
    return sorted(built_in, key=lambda e: e.position)


def _checked_new(exercises_dir: Path, exercise_id: str, known: list[Exercise]) -> Path:
    if not EXERCISE_ID.fullmatch(exercise_id) or len(exercise_id) > MAX_ID_CHARS:
        raise ScaffoldRefused(
            f"{exercise_id!r} is no exercise id: use lower-case words joined by '-', e.g. adam-step"
        )
    folder = exercises_dir / exercise_id
    if folder.exists() or any(e.id == exercise_id for e in known):
        raise ScaffoldRefused(f"the exercise {exercise_id!r} exists already ({folder})")
    return folder


def copy_exercise_folder(exercises_dir: Path, exercise_id: str, like_id: str) -> Path:
    """Copy the working exercise `like_id` (every file: cases, bugs, hints) to
    exercises_dir/ID, under the new id, placed after the last exercise; returns the folder."""
    known, _ = loaded_exercises()
    folder = _checked_new(exercises_dir, exercise_id, known)
    built_in = built_in_exercises()
    like = next((e for e in [*known, *built_in] if e.id == like_id), None)
    if like is None:
        raise ScaffoldRefused(
            f"--like {like_id!r}: no such exercise; start from one of: "
            f"{', '.join(dict.fromkeys(e.id for e in [*known, *built_in]))}"
        )
    shutil.copytree(like.folder, folder, ignore=shutil.ignore_patterns("__pycache__"))
    toml = folder / "exercise.toml"
    position = max((e.position for e in known), default=0) + 1
    text = toml.read_text()
    # The top-level keys come before every table: the first `id` and `position` are the
    # exercise's, not a case's. (An id is lower-case words: nothing re.sub would expand.)
    for key, value in (("id", json.dumps(exercise_id)), ("position", str(position))):
        text = re.sub(rf"(?m)^{key}\s*=.*$", f"{key} = {value}", text, count=1)
    toml.write_text(text)
    return folder


def new_exercise_folder(exercises_dir: Path, exercise_id: str, kind: str) -> Path:
    """Make exercises_dir/ID with every file an exercise needs; returns the folder."""
    from graders.kinds import KINDS

    known, _ = loaded_exercises()
    folder = _checked_new(exercises_dir, exercise_id, known)
    if kind not in KINDS:
        raise ScaffoldRefused(f"{kind!r} is no kind: use one of {', '.join(sorted(KINDS))}")
    like = next((e for e in [*known, *built_in_exercises()] if e.kind == kind), None)
    position = max((e.position for e in known), default=0) + 1
    unit = known[-1].unit if known else "Unit 1"
    (folder / "bugs").mkdir(parents=True)
    (folder / "exercise.toml").write_text(_toml(exercise_id, kind, position, unit, like))
    (folder / "prompt.md").write_text(
        f"# {exercise_id}\n\nSay what the learner writes, what it is given and what it "
        "returns, and the mistake it is about. Markdown; the page shows it above the editor.\n"
    )
    entry = like.entry_point if like else "solve"
    (folder / "starter.py").write_text(
        f"# What the learner starts from: it must score 0 (not-started).\n"
        f"def {entry}(*args):\n    pass\n"
    )
    (folder / "solution.py").write_text(
        "# The reference solution: every number the grader expects comes from it.\n"
        f"def {entry}(*args):\n"
        '    raise NotImplementedError("write the reference solution")\n'
    )
    (folder / "bugs" / "README.md").write_text(
        "One file per known mistake, each a whole solution that makes it, declared in\n"
        "exercise.toml as `[[variants]]` with the diagnosis it must get. CI asks for at least\n"
        "four (docs/authoring.md).\n"
    )
    return folder


def _toml_value(value: object) -> str:
    """A case's value in TOML: a table (a declared model) inline, anything else as JSON says it."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml_value(item)}" for key, item in value.items()) + "}"
    return json.dumps(value)


def _toml(exercise_id: str, kind: str, position: int, unit: str, like: Exercise | None) -> str:
    from graders.kinds import KINDS

    checks = "\n".join(f"{check} = 1" for check in KINDS[kind].judge.checks)
    cases = like.cases if like else []
    case_tables = "\n".join(
        "[[cases]]\n"
        + "\n".join(
            f"{key} = {_toml_value(value)}"
            for key, value in spec.model_dump(exclude_defaults=True, exclude={"hidden"}).items()
        )
        + f"\nhidden = {json.dumps(spec.hidden)}\n"
        for spec in cases
    )
    return f"""# Every key is described in docs/authoring.md; a key not listed there is refused.
id = "{exercise_id}"
title = "{exercise_id}"  # what learners read in every list
position = {position}  # place in the default order
unit = "{unit}"  # the heading it is listed under
kind = "{kind}"  # {KINDS[kind].summary}
entry_point = "{like.entry_point if like else "solve"}"  # the function the learner writes
signature = "{like.signature if like else "def solve(...)"}"
# What a learner whose every check passed is told: the values the checks compared, not how the
# code got them (docs/authoring.md, "The `correct` text").
correct = ""
# "per-learner": each learner's visible cases get seeds of their own.
case_seeds = "fixed"

# Points per check; drop the checks this exercise does not need.
[checks]
{checks}

# Fixed-seed problems; hidden ones show the learner only whether a check passed.
{case_tables or "# [[cases]]: see docs/authoring.md"}
# Known mistakes: one file under bugs/ each, and the diagnosis it must get.
# [[variants]]
# id = "no-zero-grad"
# file = "bugs/no_zero_grad.py"
# diagnosis = "missing-zero-grad"
"""
