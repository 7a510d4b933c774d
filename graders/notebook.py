"""Learner code from an uploaded file: a .py as it is, or a notebook's code cells joined.

The file is hostile input: any bytes, any JSON. Reading it either returns the code or raises
NotebookError with a message for the learner; nothing else escapes (tests/graders fuzz it).
Notices are plain text, never markup: they quote the learner's own lines.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

# A notice quotes at most this much of a learner's line, and there are at most this many of
# them (then one that counts the rest): a notebook of 100,000 magics makes a short page.
MAX_QUOTED_CHARS = 120
MAX_NOTICES = 20
MAX_FILENAME_CHARS = 255
# Splitting lines as Python does: `str.splitlines` also splits on form feeds, U+2028 and the
# like, which Python keeps inside a line (and a string literal).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class NotebookError(ValueError):
    """The file is not one we can read; the message says why, for the learner."""


@dataclass(frozen=True)
class ExtractedCode:
    """The Python source to grade, what was left out of it, and the file's name as shown."""

    source: str
    notices: list[str] = field(default_factory=list)
    filename: str | None = None


class _Cell(BaseModel):
    # Only what is read; the rest of a cell (outputs, metadata, ids) may be anything.
    model_config = ConfigDict(extra="ignore")
    cell_type: Any = None
    source: Any = ""


class _Notebook(BaseModel):
    model_config = ConfigDict(extra="ignore")
    cells: list[Any]


# nbformat 4: a cell's source is one string or a list of strings (its lines).
_SOURCE = TypeAdapter(str | list[str], config=ConfigDict(strict=True))


def _quoted(line: str) -> str:
    text = line.strip()
    if len(text) > MAX_QUOTED_CHARS:
        text = text[:MAX_QUOTED_CHARS] + "…"
    return f"“{text}”"


def _cell_source(number: int, cell: Any) -> str | None:
    """A cell's source if it is a code cell; None for any other cell."""
    try:
        parsed = _Cell.model_validate(cell)
    except ValidationError:
        raise NotebookError(f"cell {number} of this notebook is not a JSON object") from None
    if parsed.cell_type != "code":
        return None
    try:
        source = _SOURCE.validate_python(parsed.source)
    except ValidationError:
        raise NotebookError(
            f"cell {number} of this notebook is a code cell whose source is neither text nor "
            "a list of lines of text: save the notebook again from Jupyter"
        ) from None
    return source if isinstance(source, str) else "".join(source)


def _parse_notebook(data: bytes) -> list[Any]:
    # JSON may be UTF-8 (with or without a BOM), UTF-16 or UTF-32 (RFC 8259, section 8.1).
    encoding = json.detect_encoding(data)
    try:
        text = data.decode(encoding).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise NotebookError(
            f"this .ipynb file is not valid notebook JSON: it is not "
            f"{encoding.removesuffix('-sig').upper()} text (byte {exc.start} cannot be read)"
        ) from None
    try:
        # pydantic's JSON parser refuses deep nesting, lone surrogates and numbers out of
        # range with an error, where the json module raises RecursionError or hangs on them.
        return _Notebook.model_validate_json(text).cells
    except ValidationError as exc:
        error = exc.errors(include_input=False)[0]
        if error["type"] == "json_invalid":
            reason = str(error["msg"]).removeprefix("Invalid JSON: ")
            reason = reason.replace("recursion limit exceeded", "nested too deeply")
            raise NotebookError(f"this .ipynb file is not valid notebook JSON ({reason})") from None
        raise NotebookError(
            "this .ipynb file has no list of cells (nbformat 4 is expected)"
        ) from None


def extract_code(data: bytes) -> ExtractedCode:
    """Join a notebook's code cells into one module, dropping magics and shell lines.

    `%magic` and `!shell` lines, and whole `%%cell-magic` cells, are IPython, not Python:
    they are dropped with a notice naming the cell and line, so the learner knows.
    """
    chunks: list[str] = []
    notices: list[str] = []
    for number, cell in enumerate(_parse_notebook(data), start=1):
        source = _cell_source(number, cell)
        if source is None:
            continue
        lines = _LINE_BREAK.split(source)
        if lines[0].lstrip().startswith("%%"):
            notices.append(
                f"Cell {number} is a {_quoted(lines[0].split()[0])} cell magic: left out."
            )
            continue
        kept = []
        for line_number, line in enumerate(lines, start=1):
            if line.lstrip().startswith(("%", "!")):
                notices.append(
                    f"Cell {number}, line {line_number}: {_quoted(line)} is IPython, "
                    "not Python: left out."
                )
                # `pass` keeps the block's syntax and the line count, so a magic inside an `if`
                # still parses and error line numbers stay close to the notebook's.
                kept.append(line[: len(line) - len(line.lstrip())] + "pass")
            else:
                kept.append(line)
        chunks.append(f"# --- cell {number} ---\n" + "\n".join(kept))
    if not chunks:
        raise NotebookError("this notebook has no code cells")
    if len(notices) > MAX_NOTICES:
        left = len(notices) - MAX_NOTICES + 1
        notices = [*notices[: MAX_NOTICES - 1], f"… and {left} more IPython lines left out."]
    return ExtractedCode(source="\n\n".join(chunks) + "\n", notices=notices)


def _python_source(filename: str, data: bytes) -> str:
    """A .py file's text in the encoding Python itself would read it in (PEP 263, a BOM)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise NotebookError(
            f"{filename!r} is not UTF-8 text ({exc.msg}): save it as UTF-8"
        ) from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise NotebookError(
            f"{filename!r} is not {encoding.removesuffix('-sig').upper()} text (byte "
            f"{exc.start} cannot be read): save it as UTF-8"
        ) from None


def clean_filename(filename: str) -> str:
    """The file's own name as shown on pages: no folders, no control or format characters."""
    name = re.split(r"[/\\]", filename)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] not in "CZ" or c == " ")
    return name.strip()[:MAX_FILENAME_CHARS]


def code_from_file(filename: str, data: bytes) -> ExtractedCode:
    """The code to grade from a `.py` or `.ipynb` file, whichever way it arrived.

    Raises NotebookError with a message for the learner when the file cannot be used.
    """
    name = clean_filename(filename)
    shown = name[:60] + ("…" if len(name) > 60 else "")
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if suffix == "ipynb":
        extracted = extract_code(data)
        return ExtractedCode(extracted.source, extracted.notices, name or None)
    if suffix != "py":
        raise NotebookError(f"{shown!r} is neither a .py file nor a .ipynb notebook")
    return ExtractedCode(_python_source(shown, data), filename=name or None)
