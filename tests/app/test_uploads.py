"""The multipart variant of the submissions API: .py files and .ipynb notebooks."""

from __future__ import annotations

import json

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app.conftest import CORRECT_CODE, EXERCISE, csrf_token, wait_until_finished
from tests.uploads import filenames, files


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


# --- hostile uploads: any file, any name, any fields get 202 or a 4xx that says why ----------

_fuzz = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_texts = st.sampled_from([EXERCISE, "learner-1"]) | st.text(max_size=40)


def _says_why(response: httpx.Response) -> None:
    """Accepted, or refused with a 4xx (or a full queue's 503) whose message is there."""
    assert (
        response.status_code == 202
        or 400 <= response.status_code < 500
        or (response.status_code == 503 and "Retry-After" in response.headers)
    ), response.text
    if response.status_code != 202 and "json" in response.headers["content-type"]:
        assert response.json()["detail"]
    assert len(response.content) < 300_000


@_fuzz
@given(data=files, name=filenames, exercise=_texts, learner=_texts)
def test_the_api_upload_answers_any_file_with_202_or_a_reason(
    client: httpx.Client, auth: dict[str, str], data: bytes, name: str, exercise: str, learner: str
) -> None:
    response = client.post(
        "/api/v1/submissions/upload",
        headers=auth,
        data={"exercise": exercise, "learner": learner},
        files={"file": (name, data, "application/octet-stream")},
    )
    _says_why(response)


@_fuzz
@given(data=files, name=filenames, code=st.text(max_size=200))
def test_the_page_form_answers_any_file_with_a_page_or_a_reason(
    client: httpx.Client, data: bytes, name: str, code: str
) -> None:
    page = f"/exercises/{EXERCISE}"
    response = client.post(
        page,
        data={"code": code, "csrf_token": csrf_token(client, page)},
        files={"file": (name, data, "application/octet-stream")},
    )
    if response.status_code == 303:
        assert response.headers["location"].startswith("/submissions/")
        return
    _says_why(response)
    if "html" in response.headers["content-type"]:
        # The form again with its error, or (for a form no browser sends) an error page.
        assert 'class="form-error"' in response.text or "<h1>Not accepted</h1>" in response.text


def test_the_reported_notebooks_are_422_with_a_reason(
    client: httpx.Client, auth: dict[str, str]
) -> None:
    source_of_numbers = json.dumps({"cells": [{"cell_type": "code", "source": [1, 2]}]})
    for data, reason in (
        (b"[" * 200_000, "nested too deeply"),
        (source_of_numbers.encode(), "cell 1 of this notebook is a code cell whose source"),
    ):
        response = upload(client, auth, "step.ipynb", data)
        assert response.status_code == 422, response.text
        assert reason in response.json()["detail"]
