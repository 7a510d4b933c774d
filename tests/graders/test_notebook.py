"""Notebook uploads: code cells joined, IPython lines dropped with a notice, clear errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from graders.notebook import MAX_NOTICES, NotebookError, code_from_file, extract_code
from tests.uploads import filenames, files, notebook_files


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


# --- hostile files: every one is read or refused with a NotebookError, nothing else ----------


@settings(max_examples=300, deadline=None)
@given(data=notebook_files())
def test_any_json_document_is_read_or_refused_with_a_reason(data: bytes) -> None:
    try:
        extracted = extract_code(data)
    except NotebookError as exc:
        assert str(exc)
        return
    assert isinstance(extracted.source, str)
    assert len(extracted.notices) <= MAX_NOTICES
    assert all(isinstance(n, str) and len(n) < 400 for n in extracted.notices)


@settings(max_examples=300, deadline=None)
@given(data=files, name=filenames)
def test_any_bytes_under_any_name_are_read_or_refused_with_a_reason(data: bytes, name: str) -> None:
    for filename in (name, f"{name}.ipynb", f"{name}.py"):
        try:
            extracted = code_from_file(filename, data)
        except NotebookError as exc:
            assert str(exc)
            continue
        assert isinstance(extracted.source, str)
        assert extracted.filename is None or "/" not in extracted.filename


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[" * 200_000, "not valid notebook JSON"),
        (b'{"cells": ' + b"[" * 5000 + b"]" * 5000 + b"}", "not valid notebook JSON"),
        (b'{"cells": [{"cell_type": "code", "source": [1, 2]}]}', "cell 1 .* source"),
        (b'{"cells": [{"cell_type": "code", "source": null}]}', "cell 1 .* source"),
        (b'{"cells": [{"cell_type": "code", "source": {"a": 1}}]}', "cell 1 .* source"),
        (b'{"cells": [17]}', "cell 1 .* not a JSON object"),
        (b'{"cells": {"0": {}}}', "no list of cells"),
        (b'{"cells": [{"cell_type": "code", "source": "\\ud800"}]}', "not valid notebook JSON"),
        (b'{"nbformat": 1' + b"0" * 5000 + b', "cells": []}', "not valid notebook JSON"),
        (b"", "not valid notebook JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not"),
        ("{}".encode("utf-16-le") + b"\xff", "not"),
    ],
)
def test_hostile_notebooks_get_a_clear_message(data: bytes, message: str) -> None:
    with pytest.raises(NotebookError, match=message):
        extract_code(data)


def test_a_bom_and_other_json_encodings_are_read() -> None:
    document = json.loads(notebook(("code", "x = 1")))
    for encoding in ("utf-8-sig", "utf-16", "utf-32-le"):
        source = extract_code(json.dumps(document).encode(encoding)).source
        assert "x = 1" in source and "\ufeff" not in source


def test_lines_are_split_as_python_splits_them() -> None:
    # A form feed or U+2028 inside a line (even a string literal) stays in that line.
    source = extract_code(notebook(("code", "s = 'a\u2028b'\x0c\nt = 1\r\nu = 2"))).source
    assert "s = 'a\u2028b'\x0c\nt = 1\nu = 2" in source
    compile(source, "submission.py", "exec")


def test_notices_are_few_and_short_whatever_the_notebook() -> None:
    long_magic = "%" + "x" * 10_000
    extracted = extract_code(notebook(("code", "\n".join([long_magic] * 5000))))
    assert len(extracted.notices) == MAX_NOTICES
    assert "4981 more" in extracted.notices[-1]
    assert max(len(n) for n in extracted.notices) < 300


@pytest.mark.parametrize(
    ("data", "source"),
    [
        (b"\xef\xbb\xbfx = 1\n", "x = 1\n"),
        (b"# -*- coding: latin-1 -*-\nname = '\xe9'\n", "name = '\u00e9'"),
        ("x = 'é'\n".encode(), "x = 'é'"),
    ],
)
def test_python_files_are_read_in_their_declared_encoding(data: bytes, source: str) -> None:
    assert source in code_from_file("step.py", data).source


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("x = 1".encode("utf-16"), "not UTF-8 text"),
        (b"# coding: klingon\nx = 1\n", "unknown encoding"),
        (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", "save it as UTF-8"),
    ],
)
def test_python_files_in_a_wrong_encoding_get_a_clear_message(data: bytes, message: str) -> None:
    with pytest.raises(NotebookError, match=message):
        code_from_file("step.py", data)


def test_a_filename_loses_its_folders_and_control_characters() -> None:
    extracted = code_from_file("C:\\work\\../../etc/st\u202eep\x00.py", b"x = 1\n")
    assert extracted.filename == "step.py"
