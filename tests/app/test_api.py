"""The REST API over HTTP, on a real SQLite, with the real grader and sandbox."""

from __future__ import annotations

import json

import httpx
import pytest

from app.db import SessionFactory
from app.models import ApiKey, Submission
from app.settings import Settings
from graders.exercises import list_exercises
from tests.app.conftest import (
    CORRECT_CODE,
    EXERCISE,
    MISSING_ZERO_GRAD_CODE,
    wait_until_finished,
)


def submit(
    client: httpx.Client, auth: dict[str, str], code: str, learner: str = "learner-1"
) -> httpx.Response:
    return client.post(
        "/api/v1/submissions",
        headers=auth,
        json={"exercise": EXERCISE, "learner": learner, "code": code},
    )


def test_submissions_are_stored_then_graded(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    correct = submit(client, auth, CORRECT_CODE, learner="alice")
    buggy = submit(client, auth, MISSING_ZERO_GRAD_CODE, learner="bob")

    for response in (correct, buggy):
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["status"] == "queued"
        assert response.headers["location"] == f"/api/v1/submissions/{body['id']}"
        # Committed before the answer: another connection sees the row.
        with sessions() as session:
            row = session.get(Submission, body["id"])
            assert row is not None
            assert row.exercise_id == EXERCISE
            assert row.status in {"queued", "running", "graded"}

    graded = wait_until_finished(
        client, correct.headers["location"], auth, statuses=("graded", "error")
    )
    assert graded["status"] == "graded"
    assert graded["learner"] == "alice"
    assert graded["exercise"] == EXERCISE
    assert graded["diagnosis"] == "correct"
    assert graded["score"] == graded["max_score"] > 0
    assert graded["checks"] and all(check["passed"] for check in graded["checks"])
    assert set(graded["checks"][0]) == {"id", "passed", "points", "max_points", "message", "hidden"}
    assert graded["feedback"]
    assert graded["graded_at"] >= graded["created_at"]

    failed = wait_until_finished(
        client, buggy.headers["location"], auth, statuses=("graded", "error")
    )
    assert failed["status"] == "graded"
    assert failed["diagnosis"] == "missing-zero-grad"
    assert failed["score"] < failed["max_score"]
    assert any(not check["passed"] for check in failed["checks"])
    assert "zero_grad" in failed["feedback"]

    with sessions() as session:
        row = session.get(Submission, correct.json()["id"])
        assert row is not None
        assert row.attempts == 1
        assert row.started_at is not None and row.graded_at is not None
        assert row.started_at.tzinfo is not None


def test_list_exercises(client: httpx.Client) -> None:
    response = client.get("/api/v1/exercises")
    assert response.status_code == 200
    exercises = {exercise["id"]: exercise for exercise in response.json()}
    assert set(exercises[EXERCISE]) == {"id", "title", "unit", "signature", "max_score", "version"}
    assert [e["unit"] for e in response.json()] == [e.unit for e in list_exercises()]
    assert "train_step(model, optimizer, loss_fn, x, y)" in exercises[EXERCISE]["signature"]
    assert "solution" not in response.text
    assert list(exercises) == [exercise.id for exercise in list_exercises()]


def test_code_over_the_limit_is_413_naming_the_limit(
    client: httpx.Client, auth: dict[str, str], settings: Settings, sessions: SessionFactory
) -> None:
    code = "# pad\n" * (settings.max_code_bytes // 6 + 1)
    response = submit(client, auth, code)
    assert response.status_code == 413
    assert str(settings.max_code_bytes) in response.json()["detail"]

    # A body far over any sane size is refused before it is read, in JSON too.
    huge = client.post(
        "/api/v1/submissions",
        headers={**auth, "Content-Type": "application/json"},
        content=b"x" * (settings.request_body_bytes + 1),
    )
    assert huge.status_code == 413
    assert str(settings.max_code_bytes) in huge.json()["detail"]
    with sessions() as session:
        assert session.query(Submission).count() == 0


def test_unknown_exercise_lists_the_known_ones(client: httpx.Client, auth: dict[str, str]) -> None:
    response = client.post(
        "/api/v1/submissions",
        headers=auth,
        json={"exercise": "no-such-exercise", "learner": "l", "code": CORRECT_CODE},
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "no-such-exercise" in detail and EXERCISE in detail


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"exercise": EXERCISE, "learner": 42, "code": "x = 1"}, "learner"),
        ({"exercise": EXERCISE, "learner": "l", "code": ["x = 1"]}, "code"),
        ({"exercise": 7, "learner": "l", "code": "x = 1"}, "exercise"),
        ({"exercise": EXERCISE, "learner": "l"}, "code"),
        ({"learner": "l", "code": "x = 1"}, "exercise"),
        ({"exercise": EXERCISE, "learner": "l", "code": "x = 1", "lang": "py"}, "lang"),
    ],
)
def test_wrong_types_and_missing_fields_are_422(
    client: httpx.Client, auth: dict[str, str], body: dict[str, object], field: str
) -> None:
    response = client.post("/api/v1/submissions", headers=auth, json=body)
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert [error["loc"] for error in errors] == [["body", field]]
    assert all(error["msg"] for error in errors)


@pytest.mark.parametrize(
    ("content", "content_type", "message"),
    [
        (b'{"exercise": "train-step", "learner": ', "application/json", "not valid JSON"),
        (b"[1, 2]", "application/json", "JSON object"),
        (b'{"exercise": "train-step"}', "text/plain", "Content-Type: application/json"),
    ],
)
def test_malformed_bodies_are_422(
    client: httpx.Client, auth: dict[str, str], content: bytes, content_type: str, message: str
) -> None:
    response = client.post(
        "/api/v1/submissions",
        headers={**auth, "Content-Type": content_type},
        content=content,
    )
    assert response.status_code == 422
    assert message in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("learner", "code", "message"),
    [
        ("l", "def train_step():\x00\n    pass\n", "NUL"),
        ("le\x00arner", CORRECT_CODE, "NUL"),
        ("", CORRECT_CODE, "learner is empty"),
        ("   ", CORRECT_CODE, "learner is empty"),
        ("x" * 256, CORRECT_CODE, "255"),
        ("l", "  \n\n", "code is empty"),
        ("l", "x = '\ud800'", "not valid Unicode"),
    ],
)
def test_bad_field_values_are_422(
    client: httpx.Client,
    auth: dict[str, str],
    sessions: SessionFactory,
    learner: str,
    code: str,
    message: str,
) -> None:
    response = client.post(
        "/api/v1/submissions",
        headers={**auth, "Content-Type": "application/json"},
        # ASCII JSON: its \u escapes can carry a lone surrogate, which UTF-8 cannot.
        content=json.dumps({"exercise": EXERCISE, "learner": learner, "code": code}).encode(),
    )
    assert response.status_code == 422
    assert message in response.json()["detail"]
    with sessions() as session:
        assert session.query(Submission).count() == 0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer lg_not-a-real-key"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
    ],
)
def test_missing_or_wrong_credentials_are_401(
    client: httpx.Client, headers: dict[str, str]
) -> None:
    for response in (
        client.post(
            "/api/v1/submissions",
            headers=headers,
            json={"exercise": EXERCISE, "learner": "l", "code": CORRECT_CODE},
        ),
        client.get("/api/v1/submissions/anything", headers=headers),
    ):
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["detail"]


def test_revoked_key_is_401(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        for api_key in session.query(ApiKey):
            api_key.revoked_at = api_key.created_at
    response = client.get("/api/v1/submissions/anything", headers=auth)
    assert response.status_code == 401


def test_unknown_submission_is_404(client: httpx.Client, auth: dict[str, str]) -> None:
    response = client.get("/api/v1/submissions/00000000-0000-0000-0000-000000000000", headers=auth)
    assert response.status_code == 404
    assert "00000000-0000-0000-0000-000000000000" in response.json()["detail"]


def test_openapi_documents_the_api(client: httpx.Client) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/v1/submissions", "/api/v1/submissions/{submission_id}", "/api/v1/exercises"} <= (
        set(paths)
    )
    assert "/" not in paths
    # These routes answer with a Response they serialize themselves; the docs still name the model.
    documented = {
        ("/api/v1/submissions", "post", "202"): "SubmissionAccepted",
        ("/api/v1/submissions/upload", "post", "202"): "SubmissionAccepted",
        ("/api/v1/submissions/{submission_id}", "get", "200"): "SubmissionOut",
    }
    for (path, method, status), model in documented.items():
        schema = paths[path][method]["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{model}"}
