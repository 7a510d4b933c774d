"""Text that names a person on pages and in exports: one form per look, nothing hidden.

A display name is NFKC-normalised (full-width letters, ligatures and other compatibility forms
become their plain letters) with its whitespace collapsed, and refused when it holds a
character that shows nothing or turns the text around it: controls, format characters (zero
width, bidi controls), default-ignorable code points (Hangul fillers, variation selectors),
unassigned, private-use or surrogate code points, the blank braille pattern, or a stack of
combining marks that spills over the rows around it. So two learners cannot look identical in
the gradebook, and a name cannot reorder the cells next to it. Emails and learner ids are
identifiers, not normalised, but refused for the same hidden characters.
"""

from __future__ import annotations

import unicodedata

import regex

_HIDDEN = regex.compile(
    r"[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Cn}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}"
    r"\p{Bidi_Control}\N{BRAILLE PATTERN BLANK}]"
)
# Zero-width (non-)joiners shape Persian, Arabic and Indic words (a visible difference there);
# between letters of such a script they are part of the name, elsewhere they hide.
_JOINERS = "\N{ZERO WIDTH NON-JOINER}\N{ZERO WIDTH JOINER}"
_JOINING_LETTER = regex.compile(
    r"[\p{L}\p{M}--[\p{Latin}\p{Greek}\p{Cyrillic}\p{Common}]]", regex.V1
)
_STACKED_MARKS = regex.compile(r"\p{M}{4,}")


def hidden_character(text: str) -> str | None:
    """What in `text` would not show as itself ('U+202E RIGHT-TO-LEFT OVERRIDE at character 3'),
    or None."""
    for match in _HIDDEN.finditer(text):
        at = match.start()
        if text[at] in _JOINERS and _joins_letters(text, at):
            continue
        code_point = ord(text[at])
        name = unicodedata.name(text[at], "an unnamed character")
        return f"U+{code_point:04X} {name} at character {at + 1}"
    stacked = _STACKED_MARKS.search(text)
    if stacked is not None:
        return f"{len(stacked[0])} combining marks on one letter at character {stacked.start()}"
    return None


def _joins_letters(text: str, at: int) -> bool:
    return (
        0 < at < len(text) - 1
        and _JOINING_LETTER.match(text[at - 1]) is not None
        and _JOINING_LETTER.match(text[at + 1]) is not None
    )


def normalize_display_name(name: str) -> str:
    """The name in the one form it is kept and compared in (NFKC, single spaces)."""
    return " ".join(unicodedata.normalize("NFKC", name).split())
