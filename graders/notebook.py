"""Learner code from an uploaded file: a .py as it is, or a notebook's code cells joined."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class NotebookError(ValueError):
    """The file is not a notebook we can read; the message says why, for the learner."""


@dataclass(frozen=True)
class ExtractedCode:
    """The Python source to grade, and what was left out of it, said for the learner."""

    source: str
    notices: list[str] = field(default_factory=list)


def _cell_lines(cell: dict[str, Any]) -> list[str]:
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else source
    if not isinstance(text, str):
        raise NotebookError("a code cell's source is neither text nor a list of lines")
    return text.splitlines()


def extract_code(data: bytes) -> ExtractedCode:
    """Join a notebook's code cells into one module, dropping magics and shell lines.

    `%magic` and `!shell` lines, and whole `%%cell-magic` cells, are IPython, not Python:
    they are dropped with a notice naming the cell and line, so the learner knows.
    """
    try:
        notebook = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotebookError(f"this .ipynb file is not valid notebook JSON ({exc})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("this .ipynb file has no list of cells (nbformat 4 is expected)")
    chunks: list[str] = []
    notices: list[str] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        lines = _cell_lines(cell)
        if lines and lines[0].lstrip().startswith("%%"):
            notices.append(f"Cell {number} is a `{lines[0].split()[0]}` cell magic: left out.")
            continue
        kept = []
        for line_number, line in enumerate(lines, start=1):
            if line.lstrip().startswith(("%", "!")):
                notices.append(
                    f"Cell {number}, line {line_number}: `{line.strip()}` is IPython, "
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
    return ExtractedCode(source="\n\n".join(chunks) + "\n", notices=notices)


def code_from_file(filename: str, data: bytes) -> ExtractedCode:
    """The code to grade from a `.py` or `.ipynb` file, whichever way it arrived.

    Raises NotebookError with a message for the learner when the file cannot be used.
    """
    suffix = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    if suffix == "ipynb":
        return extract_code(data)
    if suffix != "py":
        raise NotebookError(f"{filename!r} is neither a .py file nor a .ipynb notebook")
    try:
        return ExtractedCode(source=data.decode("utf-8"))
    except UnicodeDecodeError:
        raise NotebookError(f"{filename!r} is not UTF-8 text") from None
