"""`loopgrade exercises new ID --kind K`: a new exercise folder that loads, for its author to
fill in; `check-exercises` then says what is left (the reference, the correct words, the bugs).

The folder starts from the first exercise of the same kind (its function, signature and cases:
what that kind's harness calls), or from nothing but comments when no exercise has that kind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from graders.exercises import Exercise, loaded_exercises

EXERCISE_ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
MAX_ID_CHARS = 100  # Submission.exercise_id


class ScaffoldRefused(ValueError):
    """The folder cannot be made; the message is one line."""


def new_exercise_folder(exercises_dir: Path, exercise_id: str, kind: str) -> Path:
    """Make exercises_dir/ID with every file an exercise needs; returns the folder."""
    from graders.kinds import KINDS

    if not EXERCISE_ID.fullmatch(exercise_id) or len(exercise_id) > MAX_ID_CHARS:
        raise ScaffoldRefused(
            f"{exercise_id!r} is no exercise id: use lower-case words joined by '-', e.g. adam-step"
        )
    if kind not in KINDS:
        raise ScaffoldRefused(f"{kind!r} is no kind: use one of {', '.join(sorted(KINDS))}")
    folder = exercises_dir / exercise_id
    known, _ = loaded_exercises()
    if folder.exists() or any(e.id == exercise_id for e in known):
        raise ScaffoldRefused(f"the exercise {exercise_id!r} exists already ({folder})")
    like = next((e for e in known if e.kind == kind), None)
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


def _toml(exercise_id: str, kind: str, position: int, unit: str, like: Exercise | None) -> str:
    from graders.kinds import KINDS

    checks = "\n".join(f"{check} = 1" for check in KINDS[kind].judge.checks)
    cases = like.cases if like else []
    case_tables = "\n".join(
        "[[cases]]\n"
        + "\n".join(
            f"{key} = {json.dumps(value)}"
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
# What a learner whose every check passed is told their code does: say what this exercise asks.
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
