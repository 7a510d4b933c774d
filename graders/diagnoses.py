"""Every diagnosis a grade can carry, each declared once, with the module that produces it.

A diagnosis is one `Declared` record: its code, its name, its words, the words it takes where
the default ones would be false (on an exercise without steps, of a whole loop, of
micro-batches, or one exercise's own), its hints and the lesson section they point at. It sits
beside what recognises it: the grader's failures in `graders.grading`, `correct`, `incorrect`
and `wrong-return-type` in `graders.diagnosis`, `not-started` in `graders.starter`, the step
models' codes in `graders.fitting`, and each kind's own codes in its module under
`graders/kinds` (`ExerciseKind.diagnoses`). Everything else derives from these records: the
names pages show (`graders.report.diagnosis_name`), the feedback's words
(`graders.feedback.diagnosis_words`), the shared hints (`graders.hints`), the codes
`exercise.toml` and `hints.toml` may name, and the list in docs/exercises.md.

Importing a module registers nothing: `graders.grading.declared_diagnoses()` gathers the
records from the modules that declare them, and `install` registers them once per process,
called by `graders.grading.install_diagnoses()` (the loader calls it before it reads an
exercise, the grader before it grades). It refuses, loudly, a code declared twice or a record
with a piece missing; `declared(code)` raises
`UnknownDiagnosis` for a code nobody declared, so a typo fails where it is made, never as a
silently missing sentence.

Words are not judged: `graders.exercises` leaves the text fields of these records out of an
exercise's version (`WORD_FIELDS`), so rewording a diagnosis marks no result for regrade.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

# What a diagnosis's words speak of: on an exercise without it, no model gives the code, and a
# declared bug that did is told in the words of `incorrect` (nothing false said of the code).
About = Literal["", "steps", "micro-batches", "clipping"]
# Where the default words would be false: an exercise whose function takes no step, one whose
# function runs the whole loop (called once, so "every call" means every batch), one of
# micro-batches (one step after several backward() calls).
Context = Literal["without-steps", "whole-loop", "micro-batches"]
CONTEXTS: tuple[Context, ...] = ("without-steps", "whole-loop", "micro-batches")
CODE = re.compile(r"^[a-z]+(-[a-z]+)*$")


@dataclass(frozen=True)
class Hint:
    """Three levels, opened one at a time: `where` to look, `what` is wrong, the `fix` (the
    corrected lines); `lesson` is the anchor of the prompt section that explains the mistake
    (`## Title {#anchor}`), "" when none. The same words for every learner and every case:
    never a case's numbers."""

    where: str
    what: str
    fix: str
    lesson: str = ""

    @property
    def levels(self) -> tuple[str, str, str]:
        return (self.where, self.what, self.fix)


@dataclass(frozen=True, eq=False)  # by identity: one record per code
class Declared:
    """One diagnosis: everything that is said of it, in one place.

    `words` name a cause: they are said only when a model or a known bug reproducing the
    learner's recorded values and calls gave this code (`graders.diagnosis`), which is their
    predicate. `order`: the lesson's order (zero, backward, step) closes them, for the codes
    that are about that order. `said_in`: the words in a context where the default ones would
    be false. `by_exercise`: one exercise's own words, by its id.
    """

    code: str
    name: str
    words: str
    hint: Hint | None = None
    about: About = ""
    order: bool = False
    said_in: Mapping[Context, str] = field(default_factory=dict)
    by_exercise: Mapping[str, str] = field(default_factory=dict)


class UnknownDiagnosis(LookupError):
    """A code no module declared: a typo, or a declaration missing."""


class DiagnosisDeclarationError(RuntimeError):
    """Two declarations of one code, or a declaration with a piece missing."""


def _checked(records: list[Declared]) -> dict[str, Declared]:
    found: dict[str, Declared] = {}
    for record in records:
        if record.code in found:
            raise DiagnosisDeclarationError(f"the diagnosis {record.code!r} is declared twice")
        if not CODE.match(record.code):
            raise DiagnosisDeclarationError(
                f"diagnosis {record.code!r}: a code is lower-case words joined by '-'"
            )
        if not (record.name.strip() and record.words.strip()):
            raise DiagnosisDeclarationError(f"diagnosis {record.code!r}: a name and words")
        unknown = set(record.said_in) - set(CONTEXTS)
        if unknown:
            raise DiagnosisDeclarationError(
                f"diagnosis {record.code!r}: no such context {sorted(unknown)[0]!r}: "
                f"one of {', '.join(CONTEXTS)}"
            )
        found[record.code] = record
    return found


# Filled once, by `install`, from the modules that declare them: they sit above this one
# (each imports the report, whose codes are checked here), so this one imports none of them.
_REGISTRY: dict[str, Declared] = {}
_installing = threading.Lock()  # threads that load exercises at once fill it once


def install(gather: Callable[[], Iterable[Declared]]) -> None:
    """Register every diagnosis `gather` returns, in the order of the modules that declare
    them, once per process: a later call does nothing (`graders.grading.install_diagnoses`)."""
    with _installing:
        if not _REGISTRY:
            _REGISTRY.update(_checked(list(gather())))


def registry() -> dict[str, Declared]:
    """Every declared diagnosis by code, in the order of the modules that declare them."""
    if not _REGISTRY:
        raise DiagnosisDeclarationError(
            "no diagnosis installed: call graders.grading.install_diagnoses() first (loading an "
            "exercise or grading does)"
        )
    return _REGISTRY


def declared(code: str) -> Declared:
    """The declaration of `code`; UnknownDiagnosis when nothing declares it."""
    record = registry().get(code)
    if record is None:
        raise UnknownDiagnosis(
            f"no such diagnosis code: {code!r} (docs/exercises.md lists them; a new one is "
            "declared with the module that produces it, docs/authoring.md)"
        )
    return record


def codes() -> tuple[str, ...]:
    """Every declared code."""
    return tuple(registry())
