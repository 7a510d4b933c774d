"""Exercises as data: one folder each under `exercises/`, read from `exercise.toml`, checked
against the kinds, and served once proven sound (`graders.proving`). What an exercise is, is
`graders.exercise`.

A folder whose configuration is wrong (a check, kind or diagnosis code the grader does not
know, a missing field) is refused when exercises load, with a one-line reason that names the
file, the field and what to do; the other folders still load (`refused_exercises`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import logging
import os
import sys
import threading
import tomllib
from pathlib import Path

from pydantic import ValidationError

from graders.exercise import KIND_SETTINGS, Exercise
from graders.grading import install_diagnoses
from graders.kinds import KINDS, kind_of
from graders.optimizers import OptimizerFields
from graders.proving import proven_problems
from graders.syntax import parse_module

EXERCISES_DIR = Path(
    os.environ.get("LOOPGRADE_EXERCISES_DIR", Path(__file__).resolve().parent.parent / "exercises")
)


log = logging.getLogger(__name__)


class UnknownExercise(KeyError):
    """No exercise has this id."""


def _judged_toml(content: bytes) -> bytes:
    """exercise.toml without `correct`, the sentence a correct answer is told (rendered when
    read): its other keys, sorted. A file that does not parse is hashed as it is."""
    try:
        config = tomllib.loads(content.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return content
    config.pop("correct", None)
    return json.dumps(config, sort_keys=True, default=str).encode()


def _content_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    # hints.toml is left out: hints never change a grade, so a new hint must not mark the
    # results graded before for regrade (graders/hints.py).
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "hints.toml"):
        content = path.read_bytes()
        if path == folder / "exercise.toml":
            content = _judged_toml(content)
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + content + b"\0")
    return digest.hexdigest()[:16]


class ExerciseRefused(ValueError):
    """An exercise folder that cannot be graded as configured; the message is one line."""


def _one_line(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()
    )


# Every key exercise.toml may have (docs/authoring.md): any other is refused, not ignored, as
# a setting the grader would silently not apply.
TOML_KEYS = frozenset(
    {
        "id", "title", "position", "kind", "entry_point", "signature", "prompt", "starter",
        "solution", "checks", "cases", "variants", "unit", "correct", "case_seeds",
    }
)  # fmt: skip


def load_exercise(folder: Path) -> Exercise:
    """Read one exercise folder; raises ExerciseRefused naming the file and field that is
    wrong and what to do."""
    install_diagnoses()  # the codes its toml may name
    toml = folder / "exercise.toml"
    try:
        config = tomllib.loads(toml.read_text())
        unknown = sorted(set(config) - TOML_KEYS)
        if unknown:
            raise ExerciseRefused(
                f"{toml}: {', '.join(map(repr, unknown))}: no such key, and the grader would "
                "not apply it: remove it (the keys are in docs/authoring.md)"
            )
        exercise = Exercise.model_validate(
            {
                "id": config["id"],
                "title": config["title"],
                "position": config["position"],
                "unit": config.get("unit", ""),
                "correct": config.get("correct", ""),
                "case_seeds": config.get("case_seeds", "fixed"),
                "kind": config["kind"],
                "entry_point": config["entry_point"],
                "signature": config["signature"],
                "prompt_markdown": (folder / config.get("prompt", "prompt.md")).read_text(),
                "starter_code": (folder / config.get("starter", "starter.py")).read_text(),
                "solution_code": (folder / config.get("solution", "solution.py")).read_text(),
                "checks": config["checks"],
                "cases": config["cases"],
                "variants": [
                    {**variant, "source": (folder / variant["file"]).read_text()}
                    for variant in config.get("variants", [])
                ],
                "version": _content_hash(folder),
                "folder": str(folder),
                "solution_file": config.get("solution", "solution.py"),
            }
        )
    except ExerciseRefused:
        raise
    except ValidationError as exc:
        raise ExerciseRefused(f"{toml}: {_one_line(exc)} (see docs/authoring.md)") from exc
    except KeyError as exc:
        raise ExerciseRefused(f"{toml}: the field {exc} is missing: add it") from exc
    except (OSError, ValueError) as exc:
        raise ExerciseRefused(f"{toml}: {exc}".replace("\n", " ")) from exc
    problem = configuration_problem(exercise)
    if problem is not None:
        raise ExerciseRefused(f"{toml}: {problem}")
    return exercise.model_copy(update={"version": _judged_version(exercise)})


# The shared modules of graders/ that judge every exercise, with the kind's own module: all of
# graders/*.py but these, which cannot change a stored grade or report (the command line, the
# new-folder scaffold, reading an upload into code, hints, and check-exercises' proof).
GRADERS_DIR = Path(__file__).resolve().parent
NOT_JUDGING = frozenset(
    {"__main__.py", "cli.py", "scaffold.py", "notebook.py", "hints.py", "proving.py", "mutation.py"}
)


def _judged_version(exercise: Exercise) -> str:
    """The folder's hash with the source of the grader code that judges it (its kind's module and
    the shared judging modules): a change of any makes a new version, so results graded before
    are marked for regrade."""
    module = sys.modules[kind_of(exercise).record.__module__]
    shared = sorted(p for p in GRADERS_DIR.glob("*.py") if p.name not in NOT_JUDGING)
    digest = hashlib.sha256(exercise.version.encode() + b"\0")
    for path in [Path(str(module.__file__)), *shared]:
        digest.update(path.name.encode() + b"\0" + judged_source(path.read_text()) + b"\0")
    return digest.hexdigest()[:16]


# What a module says rather than judges: the text fields of a diagnosis's declaration
# (graders.diagnoses: its name, words, hints), a claim's words (graders.claims) and a check's
# sentence's text (graders.sentences), rendered when a grade is read; and docstrings. Comments
# are not in the syntax tree at all.
WORD_FIELDS = frozenset(
    {"name", "words", "said_in", "by_exercise", "hint", "where", "what", "fix", "lesson"}
)
WORD_CALLS = frozenset({"Declared", "Hint", "Claim", "Sentence"})


# Cached by the module's text: each exercise's version reads the same judging modules, and a
# process loads every exercise (twice at a server's start: its threads ask at once).
@functools.cache
def judged_source(source: str) -> bytes:
    """A module's syntax tree without its words (`WORD_FIELDS` of `WORD_CALLS`, a Claim's
    words, docstrings): what of it can change a stored grade."""
    tree = parse_module(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Expr(ast.Constant(""))
        if isinstance(node, ast.Call):
            called = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if called not in WORD_CALLS:
                continue
            for keyword in node.keywords:
                if keyword.arg in WORD_FIELDS:
                    keyword.value = ast.Constant("")
            if called in ("Claim", "Sentence") and len(node.args) > 1:
                # Claim(key, words, holds); Sentence(key, text): the text's fields are judged
                # where the sentence is said (the values it is given), not in its words.
                node.args[1] = ast.Constant("")
    return ast.dump(tree).encode()


def configuration_problem(exercise: Exercise) -> str | None:
    """What in the exercise the grader cannot judge (a kind it does not know, a check its kind
    does not make), said as the field and what to do; None when all is known."""
    kind = KINDS.get(exercise.kind)
    if kind is None:
        return f"kind: {exercise.kind!r} is no kind: use one of {', '.join(sorted(KINDS))}"
    unknown = sorted(set(exercise.checks) - set(kind.judge.checks))
    if unknown:
        return (
            f"checks: {', '.join(map(repr, unknown))} is no check of kind {exercise.kind!r}: "
            f"use one of {', '.join(sorted(kind.judge.checks))}"
        )
    for case in exercise.cases:
        declared = case.model_fields_set | ({"model.dropout"} if case.model.dropout else set())
        unread = sorted(declared & KIND_SETTINGS - kind.case_settings)
        if unread == ["model.dropout"]:
            return (
                f"cases ({case.id}): model: dropout: kind {kind.name!r} cannot judge a model "
                "with dropout: its masks are random draws, which the grader cannot recompute "
                "outside the sandbox to judge what the learner's code did: remove it (only "
                "'evaluation' reads it, where evaluation mode turns it off)"
            )
        if unread:
            reads = ", ".join(sorted(kind.case_settings)) or "none of them"
            return (
                f"cases ({case.id}): {', '.join(map(repr, unread))}: kind {kind.name!r} does "
                f"not read it, so it would change nothing: remove it (of the settings only "
                f"some kinds read, {kind.name!r} reads {reads})"
            )
        if kind.optimizer_settings is not None:
            foreign = sorted(
                case.model_fields_set & set(OptimizerFields.model_fields) - kind.optimizer_settings
            )
            if foreign:
                return (
                    f"cases ({case.id}): {', '.join(map(repr, foreign))}: kind {kind.name!r} "
                    "builds no optimizer (the learner's function is one), so it would change "
                    f"nothing: remove it (of the optimizer's settings, {kind.name!r} reads "
                    f"{', '.join(sorted(kind.optimizer_settings))})"
                )
        problem = kind.case_problem(case) if kind.case_problem is not None else None
        if problem is not None:
            return f"cases ({case.id}): {problem}"
    return None


def _read() -> tuple[dict[str, Exercise], dict[str, str]]:
    """The exercise folders that load, by id in the unit's order, and those refused, with why."""
    loaded: dict[str, tuple[Exercise, str]] = {}
    refused: dict[str, str] = {}
    for toml in sorted(EXERCISES_DIR.glob("*/exercise.toml")):
        try:
            exercise = load_exercise(toml.parent)
            if exercise.id in loaded:
                raise ExerciseRefused(
                    f"{toml}: id: {exercise.id!r} is taken by the folder "
                    f"{loaded[exercise.id][1]!r}: give it another"
                )
        except ExerciseRefused as exc:
            refused[toml.parent.name] = str(exc)
            log.error("exercise folder %s refused: %s", toml.parent.name, exc)
            continue
        loaded[exercise.id] = (exercise, toml.parent.name)
    in_order = sorted((exercise for exercise, _ in loaded.values()), key=lambda e: e.position)
    return {exercise.id: exercise for exercise in in_order}, refused


_proving = threading.Lock()


@functools.cache
def _loaded() -> tuple[dict[str, Exercise], dict[str, str]]:
    """The exercises served, by id, and the folders refused, with why. Read once per process:
    a folder changed, added or removed is seen at the next restart. A folder that loads is
    served only once proven sound by check-exercises' own proof (graders.proving), which is
    kept per version, so that a restart does not prove it again."""
    with _proving:  # threads that ask at once: the later ones read the proofs the first kept
        loaded, refused = _read()
        refused = dict(refused)
        served: dict[str, Exercise] = {}
        for exercise in loaded.values():
            try:
                problems = proven_problems(exercise)
            except Exception as exc:  # an exercise the grader cannot even prove: not served
                log.exception("the proof of exercise %s stopped", exercise.id)
                said = " ".join(str(exc).split())  # one line, as every reason
                problems = [f"{exercise.id}: the proof stopped: {type(exc).__name__}: {said}"]
            if problems:
                folder = Path(exercise.folder).name
                refused[folder] = (
                    f"{exercise.folder}: not served, unsound ({len(problems)} problem(s): "
                    f"loopgrade check-exercises says them all): {problems[0]}"
                )
                log.error("exercise folder %s refused: %s", folder, refused[folder])
                continue
            served[exercise.id] = exercise
        log.info(
            "%d exercises served from %s, %d folders refused; a changed folder is read at the "
            "next restart of each server and worker",
            len(served),
            EXERCISES_DIR,
            len(refused),
        )
        return served, refused


def _all_exercises() -> dict[str, Exercise]:
    return _loaded()[0]


def loaded_exercises() -> tuple[list[Exercise], dict[str, str]]:
    """The folders that load, proven or not, in the unit's order, and those that do not (folder
    -> why): for check-exercises, which proves them itself, and the scaffold."""
    loaded, refused = _read()
    return list(loaded.values()), dict(refused)


def refused_exercises() -> dict[str, str]:
    """The exercise folders that were not loaded: folder name -> the one-line reason."""
    return dict(_loaded()[1])


def list_exercises() -> list[Exercise]:
    """Every exercise, in the unit's order."""
    return list(_all_exercises().values())


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id; raises UnknownExercise."""
    try:
        return _all_exercises()[exercise_id]
    except KeyError:
        raise UnknownExercise(exercise_id) from None
