"""Learner-controlled text in markdown: shown verbatim, never interpreted.

Whatever the learner's code chose (an exception's type and message, a traceback, a line of
their code, a type name) goes into feedback and check messages only through `learner_text`.
"""

from __future__ import annotations

import re
import unicodedata

# Bidirectional overrides and isolates reorder what is shown around them; other invisible
# format characters hide text. Neither belongs in quoted code.
_INVISIBLE = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def learner_text(text: str, *, block: bool = False) -> str:
    """Learner-controlled text as markdown that shows it verbatim, never interpreted.

    Inline, a code span; with `block`, a fenced code block (for a traceback or a line of code).
    The fence is longer than any run of backticks in the text, so nothing inside can close it,
    and markdown renderers escape HTML inside code. Control and bidi characters are replaced
    by U+FFFD so that what is shown is what is there.
    """
    cleaned = "".join(
        "\ufffd"
        if ch in _INVISIBLE or (unicodedata.category(ch) == "Cc" and ch not in "\n\t")
        else ch
        for ch in text
    )
    longest = max((len(run) for run in re.findall(r"`+", cleaned)), default=0)
    if block:
        fence = "`" * max(3, longest + 1)
        # On lines of its own wherever it is placed: a fence may interrupt a paragraph.
        return f"\n{fence}text\n{cleaned.rstrip(chr(10))}\n{fence}\n"
    fence = "`" * (longest + 1)
    flat = " ".join(cleaned.split("\n"))
    # A span that starts or ends with a backtick or a space (or is blank) is padded with a
    # space at each end, which the renderer strips again.
    padded = f" {flat} " if not flat.strip(" ") or flat[0] in " `" or flat[-1] in " `" else flat
    return f"{fence}{padded}{fence}"
