"""The multipart variant of the submissions API: .py files and .ipynb notebooks."""

from __future__ import annotations

import json

import httpx

from tests.app.conftest import CORRECT_CODE, EXERCISE, wait_until_finished


def notebook(*sources: str) -> bytes:
    cells = [{"cell_type": "code", "source": s, "metadata": {}, "outputs": []} for s in sources]
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}).encode()


def upload(
    client: httpx.Client, auth: dict[str, str], name: str, data: bytes, exercise: str = EXERCISE
) -> httpx.Response:
    return client.post(
        "/api/v1/submissions/upload",
        headers=auth,
        data={"exercise": exercise, "learner": "uploader"},
        files={"file": (name, data, "application/octet-stream")},
    )


def test_a_notebook_is_graded_with_notices_for_what_was_left_out(
    client: httpx.Client, auth: dict[str, str]
) -> None:
    response = upload(
        client, auth, "step.ipynb", notebook("%pip install torch\nimport torch", CORRECT_CODE)
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued"
    assert len(body["notices"]) == 1 and "%pip install torch" in body["notices"][0]
    result = wait_until_finished(
        client, response.headers["Location"], auth, statuses=("graded", "error")
    )
    assert result["diagnosis"] == "correct"
    assert result["score"] == result["max_score"]


def test_a_py_file_is_accepted(client: httpx.Client, auth: dict[str, str]) -> None:
    response = upload(client, auth, "step.py", CORRECT_CODE.encode())
    assert response.status_code == 202, response.text
    assert response.json()["notices"] == []
    assert response.headers["Location"].startswith("/api/v1/submissions/")


def test_unusable_files_are_422_with_a_reason(client: httpx.Client, auth: dict[str, str]) -> None:
    cases = {
        ("step.txt", b"print(1)"): "neither a .py file nor a .ipynb notebook",
        ("step.ipynb", b'{"cells": ['): "not valid notebook JSON",
        ("step.ipynb", notebook()): "no code cells",
        ("step.py", b"\xff\xfe"): "not UTF-8 text",
    }
    for (name, data), reason in cases.items():
        response = upload(client, auth, name, data)
        assert response.status_code == 422, (name, response.text)
        assert reason in response.json()["detail"]


def test_an_oversized_upload_is_413(client: httpx.Client, auth: dict[str, str]) -> None:
    response = upload(client, auth, "big.py", b"#" * (1024 * 1024 + 1))
    assert response.status_code == 413
    assert "upload limit" in response.json()["detail"]


def test_uploads_need_a_key_and_a_known_exercise(
    client: httpx.Client, auth: dict[str, str]
) -> None:
    assert upload(client, {}, "step.py", CORRECT_CODE.encode()).status_code == 401
    unknown = upload(client, auth, "step.py", CORRECT_CODE.encode(), exercise="nope")
    assert unknown.status_code == 422
    assert "train-step" in unknown.json()["detail"]
