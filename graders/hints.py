"""Hints per diagnosis: each diagnosis's own, declared with it (`graders.diagnoses.Declared.hint`),
and `exercises/<id>/hints.toml` for one exercise's (its table for a code replaces the declared one).

Each table is named by a diagnosis code and has three levels, opened one at a time: `where` (where
to look), `what` (what is wrong), `fix` (the corrected lines); and may name a `lesson`, the
anchor of a section of the exercise's prompt that explains the mistake (`## Title {#anchor}`).
Hints are the same words for every learner and every case: they never quote a case's numbers.

Hints do not change grades: the exercise's version hash leaves hints.toml out
(`graders.exercises._content_hash`), so a new or reworded hint does not mark results for regrade.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from graders.diagnoses import registry
from graders.exercise import Exercise
from graders.exercises import list_exercises

HINTS_FILE = "hints.toml"
# The levels, in the order a learner opens them; `fix` is the one a course may withhold.
LEVELS = ("where", "what", "fix")
OPTIONAL_KEYS = frozenset({"lesson"})
# `## Section title {#anchor}` in a prompt: the anchor a hint's `lesson` names.
PROMPT_ANCHOR = re.compile(r"^#{1,6} .*\{#([a-z0-9][a-z0-9-]*)\}\s*$", re.MULTILINE)
# What an exercise's page calls a prompt section's anchor: prefixed, so that no author's anchor
# is ever the id of the page's own elements.
ANCHOR_PREFIX = "lesson-"


@dataclass(frozen=True)
class Hints:
    """The hints for one diagnosis of one exercise."""

    levels: tuple[str, ...]  # where, what, fix
    lesson: str = ""  # an anchor in the prompt, "" when none


class HintsRefused(ValueError):
    """A hints file that cannot be used; the message names the file and the field."""


def read_hints_file(path: Path, prompt_markdown: str | None = None) -> dict[str, Hints]:
    """One hints file, checked: every table a known diagnosis code with its three levels as
    text, and a `lesson` that is an anchor of the prompt (when a prompt is given)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HintsRefused(f"{path}: {exc}".replace("\n", " ")) from None
    anchors = set(PROMPT_ANCHOR.findall(prompt_markdown or ""))
    hints = {}
    for code, table in data.items():
        if code not in registry():
            raise HintsRefused(
                f"{path}: [{code}]: no such diagnosis code: use one of those docs/exercises.md "
                "lists (declared in graders.diagnoses)"
            )
        if not isinstance(table, dict):
            raise HintsRefused(f"{path}: {code}: must be a table with keys {', '.join(LEVELS)}")
        unknown = sorted(set(table) - set(LEVELS) - OPTIONAL_KEYS)
        if unknown:
            raise HintsRefused(f"{path}: [{code}] {unknown[0]}: no such key: remove it")
        for level in LEVELS:
            text = table.get(level)
            if not isinstance(text, str) or not text.strip():
                raise HintsRefused(f"{path}: [{code}] {level}: missing: write this level's hint")
        lesson = table.get("lesson", "")
        if not isinstance(lesson, str) or (
            prompt_markdown is not None and lesson and lesson not in anchors
        ):
            raise HintsRefused(
                f"{path}: [{code}] lesson: {lesson!r} is no anchor of the prompt: add "
                f"`{{#{lesson}}}` to the end of a heading of the prompt, or remove it"
            )
        hints[code] = Hints(tuple(table[level].strip() for level in LEVELS), lesson)
    return hints


def _own_file(exercise: Exercise) -> Path:
    return Path(exercise.folder) / HINTS_FILE


def hint_problems(exercises: list[Exercise]) -> list[str]:
    """What is wrong in the hints files (check-exercises): one line each."""
    problems = []
    for path, prompt in [(_own_file(e), e.prompt_markdown) for e in exercises]:
        if not path.exists():
            continue
        try:
            read_hints_file(path, prompt)
        except HintsRefused as exc:
            problems.append(str(exc))
    return problems


@functools.cache
def _hints_by_exercise() -> dict[str, dict[str, Hints]]:
    """Every exercise's hints, read once per process like the exercises. A file that is wrong
    gives no hints (check-exercises says why) rather than a page that fails."""
    return {
        e.id: declared_hints(e.prompt_markdown) | _read_or_none(_own_file(e), e.prompt_markdown)
        for e in list_exercises()
    }


def declared_hints(prompt_markdown: str) -> dict[str, Hints]:
    """The hints declared with each diagnosis (graders.diagnoses), by code, for an exercise with
    this prompt: a `lesson` the prompt has no section for is left out."""
    anchors = set(PROMPT_ANCHOR.findall(prompt_markdown))
    return {
        code: Hints(record.hint.levels, record.hint.lesson if record.hint.lesson in anchors else "")
        for code, record in registry().items()
        if record.hint is not None
    }


def _read_or_none(path: Path, prompt: str | None) -> dict[str, Hints]:
    if not path.exists():
        return {}
    try:
        return read_hints_file(path, prompt)
    except HintsRefused:
        return {}


def hints_for(exercise_id: str, diagnosis: str) -> Hints | None:
    """The hints a learner with this diagnosis on this exercise may open; None when there are
    none (a correct answer, an unknown exercise, a code no file has written hints for)."""
    return _hints_by_exercise().get(exercise_id, {}).get(diagnosis)
