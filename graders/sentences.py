"""A check's sentences: each one a template declared once, beside the kind that says it.

A `Sentence` is a key and a text with named fields (`str.format`'s: "`{where}` is {yours:.6g}").
Judging says one by its values (`SENTENCE(where=..., yours=...)`, a `Said`); a grade stores the
`Said`, its key and values, beside the message as it was said then (`graders.report.Check`),
and the words are made when the grade is read (`worded`): rewording a sentence changes no grade
and, as its text is no part of an exercise's version (`graders.exercises.judged_source` leaves a
`Sentence`'s text out), marks no result for regrade. A key this version does not know, or values
its text cannot take, is shown as the message it was graded with (data outlives code).

A value is a number, a text (a case's id, a learner's type name, already escaped for markdown),
a list of them, or another `Said` (a part of the sentence with words of its own). Values are
the case's and the learner's numbers, never words: they are not rendered as a template.

The rule for what a check says (docs/authoring.md): where no diagnosis explains a failing check,
it says what differs and by how much, the learner's value first, and no cause.
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

KEY_CHARACTERS = frozenset(string.ascii_lowercase + string.digits + "-/.")


class Said(BaseModel):
    """One sentence said: the key of its template and the values it was said with."""

    model_config = ConfigDict(frozen=True)

    key: str
    values: dict[str, Any] = {}


SENTENCES: dict[str, Sentence] = {}
# Keys grades were stored with for a sentence now declared once under another key (the same
# words): a stored key is worded as the sentence that replaced it (`retire`).
RETIRED: dict[str, Sentence] = {}


class SentenceDeclarationError(RuntimeError):
    """Two sentences with one key, a key of other characters, or a text that is no template."""


def _fields(text: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as error:
        raise SentenceDeclarationError(f"{text[:60]!r}: {error}") from None


@dataclass(frozen=True, eq=False)
class Sentence:
    """A check's sentence: `key` (the kind's name, '/', a name), `text` with named fields."""

    key: str
    text: str

    def __post_init__(self) -> None:
        if not self.key or set(self.key) - KEY_CHARACTERS or "/" not in self.key:
            raise SentenceDeclarationError(
                f"sentence {self.key!r}: a key is 'owner/name', lower-case words, digits, '-'"
            )
        if self.key in SENTENCES or self.key in RETIRED:
            raise SentenceDeclarationError(f"two sentences are keyed {self.key!r}")
        if any(not name.isidentifier() for name in _fields(self.text)):
            raise SentenceDeclarationError(f"sentence {self.key!r}: fields are plain names")
        SENTENCES[self.key] = self

    @property
    def fields(self) -> set[str]:
        return _fields(self.text)

    def __call__(self, **values: Any) -> Said:
        missing = self.fields - set(values)
        if missing:
            raise TypeError(f"sentence {self.key!r} needs {', '.join(sorted(missing))}")
        return Said(key=self.key, values={name: _stored(value) for name, value in values.items()})


def retire(key: str, sentence: Sentence) -> None:
    """Word a grade's stored `key` as `sentence` from now on: a kind that says the shared
    sentence where it declared its own keeps its old grades worded (and its old key taken)."""
    if key in SENTENCES or key in RETIRED or set(key) - KEY_CHARACTERS or "/" not in key:
        raise SentenceDeclarationError(f"{key!r} is declared already, or no 'owner/name' key")
    RETIRED[key] = sentence


def _stored(value: Any) -> Any:
    """A value as a grade stores it (JSON, in SQLite and PostgreSQL): a number that is not
    finite as its text, which the rendering shows as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list | tuple):
        return [_stored(item) for item in value]
    return value


class _Values(string.Formatter):
    """Fills a template's fields; a value its format cannot take is shown as its text."""

    def format_field(self, value: Any, format_spec: str) -> str:
        try:
            return str(super().format_field(value, format_spec))
        except (TypeError, ValueError):
            return str(value)


_FORMATTER = _Values()


def worded(said: Said | Mapping[str, Any]) -> str | None:
    """The words of a stored `Said`, made now; None when this version does not know its key (or
    a part's), or its values do not fit its text."""
    if not isinstance(said, Said):
        try:
            said = Said.model_validate(said)
        except ValueError:
            return None
    sentence = SENTENCES.get(said.key) or RETIRED.get(said.key)
    if sentence is None or sentence.fields - set(said.values):
        return None
    values: dict[str, Any] = {}
    for name, value in said.values.items():
        if isinstance(value, Said) or (isinstance(value, dict) and "key" in value):
            part = worded(value)
            if part is None:
                return None
            values[name] = part
        else:
            values[name] = value
    try:
        return _FORMATTER.vformat(sentence.text, (), values)
    except (KeyError, IndexError, AttributeError):
        return None


def words_of(said: Said) -> str:
    """The words of a `Said` made by this version (its key is known): what a grade stores as
    the message it was said with."""
    text = worded(said)
    if text is None:
        raise LookupError(f"no sentence {said.key!r}, or values that do not fit it")
    return text
