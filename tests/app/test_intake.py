"""One intake path: idempotent retries over the API, on a real server and a real SQLite."""

from __future__ import annotations

import threading
import uuid

import httpx
from sqlalchemy import func, select

from app.api.keys import create_api_key
from app.db import SessionFactory
from app.models import IdempotencyKey, Submission
from tests.app.conftest import CORRECT_CODE, EXERCISE, MISSING_ZERO_GRAD_CODE


def post(
    client: httpx.Client, auth: dict[str, str], key: str | None, code: str = CORRECT_CODE
) -> httpx.Response:
    headers = {**auth, **({"Idempotency-Key": key} if key is not None else {})}
    return client.post(
        "/api/v1/submissions",
        headers=headers,
        json={"exercise": EXERCISE, "learner": "alice", "code": code},
    )


def count_submissions(sessions: SessionFactory) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Submission)) or 0


def test_a_retry_with_the_same_key_gets_the_same_submission(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    key = str(uuid.uuid4())
    first = post(client, auth, key)
    retry = post(client, auth, key)

    assert first.status_code == retry.status_code == 202, retry.text
    assert retry.json()["id"] == first.json()["id"]
    assert retry.headers["Location"] == first.headers["Location"]
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert count_submissions(sessions) == 1


def test_the_same_key_with_another_body_is_refused(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    key = "retry-me-1"
    assert post(client, auth, key).status_code == 202
    other = post(client, auth, key, code=MISSING_ZERO_GRAD_CODE)

    assert other.status_code == 422
    assert "already used for a different submission" in other.json()["detail"]
    assert count_submissions(sessions) == 1


def test_keys_belong_to_their_api_key_and_requests_without_one_are_not_deduplicated(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        _, other_secret = create_api_key(session, name="another client")
    other_auth = {"Authorization": f"Bearer {other_secret}"}

    mine = post(client, auth, "shared-key")
    theirs = post(client, other_auth, "shared-key")
    assert mine.status_code == theirs.status_code == 202
    assert mine.json()["id"] != theirs.json()["id"]

    assert post(client, auth, None).json()["id"] != post(client, auth, None).json()["id"]
    assert count_submissions(sessions) == 4


def test_an_unusable_key_is_a_clear_422(client: httpx.Client, auth: dict[str, str]) -> None:
    for bad in ("", "x" * 256, "has space"):
        response = post(client, auth, bad)
        assert response.status_code == 422, bad
        assert "Idempotency-Key must be 1 to 255 visible ASCII" in response.json()["detail"]


def test_a_refused_request_does_not_use_up_its_key(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    refused = post(client, auth, "fix-and-retry", code="   ")
    assert refused.status_code == 422
    with sessions() as session:
        assert session.scalars(select(IdempotencyKey)).all() == []
    assert post(client, auth, "fix-and-retry").status_code == 202


def test_concurrent_retries_with_one_key_make_one_submission(
    server_url: str, auth: dict[str, str], sessions: SessionFactory
) -> None:
    # The requests are released together; whichever commits second finds the first's key.
    start = threading.Barrier(6)
    ids: list[str] = []

    def retry() -> None:
        with httpx.Client(base_url=server_url, timeout=60) as client:
            start.wait()
            response = post(client, auth, "lost-connection")
            assert response.status_code == 202, response.text
            ids.append(response.json()["id"])

    threads = [threading.Thread(target=retry) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 6
    assert len(set(ids)) == 1
    assert count_submissions(sessions) == 1


def test_an_upload_retried_with_its_key_is_one_submission(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    def upload() -> httpx.Response:
        return client.post(
            "/api/v1/submissions/upload",
            headers={**auth, "Idempotency-Key": "upload-1"},
            data={"exercise": EXERCISE, "learner": "alice"},
            files={"file": ("step.py", CORRECT_CODE.encode(), "text/x-python")},
        )

    first, retry = upload(), upload()
    assert first.status_code == retry.status_code == 202, retry.text
    assert first.json()["id"] == retry.json()["id"]
    assert count_submissions(sessions) == 1
