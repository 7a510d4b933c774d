"""Notebook uploads: code cells joined, IPython lines dropped with a notice, clear errors."""

from __future__ import annotations

import json

import pytest

from graders.notebook import NotebookError, extract_code


def notebook(*cells: tuple[str, str | list[str]]) -> bytes:
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [
                {"cell_type": kind, "source": source, "metadata": {}, "outputs": []}
                for kind, source in cells
            ],
        }
    ).encode()


def test_code_cells_are_joined_in_order_and_markdown_is_skipped() -> None:
    extracted = extract_code(
        notebook(
            ("markdown", "# My answer"),
            ("code", ["import torch\n", "\n"]),
            ("code", "def train_step(model, optimizer, loss_fn, x, y):\n    return 0.0"),
        )
    )
    source = extracted.source
    assert "My answer" not in source
    assert source.index("import torch") < source.index("def train_step")
    compile(source, "submission.py", "exec")
    assert extracted.notices == []


def test_magics_and_shell_lines_are_dropped_with_a_notice() -> None:
    extracted = extract_code(
        notebook(
            ("code", "%matplotlib inline\n!pip install torch\nimport torch"),
            ("code", "%%timeit\nx = 1"),
            ("code", "if True:\n    %time y = 2\nz = 3"),
        )
    )
    assert "matplotlib" not in extracted.source and "pip install" not in extracted.source
    assert "x = 1" not in extracted.source
    compile(extracted.source, "submission.py", "exec")
    assert len(extracted.notices) == 4
    assert any("Cell 2" in n and "%%timeit" in n for n in extracted.notices)
    assert any("Cell 1, line 2" in n and "!pip install torch" in n for n in extracted.notices)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe not json", "not valid notebook JSON"),
        (b"[1, 2]", "no list of cells"),
        (notebook(("markdown", "only words")), "no code cells"),
    ],
)
def test_unreadable_notebooks_get_a_clear_message(data: bytes, message: str) -> None:
    with pytest.raises(NotebookError, match=message):
        extract_code(data)
