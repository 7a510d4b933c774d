"""One intake path: idempotent retries over the API, on a real server and a real SQLite."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest
from sqlalchemy import func, select, update

from app.api_keys import create_api_key
from app.db import SessionFactory
from app.grading.intake import CodeSyntaxError, check_syntax
from app.models import IdempotencyKey, KeptSubmission, Submission, WebSession, utc_now
from app.web.kept_submissions import KEPT_COOKIE
from tests.app.conftest import CORRECT_CODE, EXERCISE, MISSING_ZERO_GRAD_CODE, csrf_token
from tests.app.people import make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS


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
        with httpx.Client(base_url=server_url, timeout=HTTP_TIMEOUT_SECONDS) as client:
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


SYNTAX_ERROR_CODE = (
    "def train_step(model, optimizer, loss_fn, x, y):\n    loss = (1 +\n    return loss\n"
)


def test_code_that_does_not_compile_is_refused_with_its_line_and_never_stored(
    client: httpx.Client, auth: dict[str, str], sessions: SessionFactory
) -> None:
    # The API: 422, the line, and the key not used up.
    refused = post(client, auth, "syntax-1", code=SYNTAX_ERROR_CODE)
    assert refused.status_code == 422, refused.text
    assert refused.json()["line"] == 2
    assert refused.json()["detail"].startswith("Syntax error on line 2: ")
    assert "does not count as an attempt" in refused.json()["detail"]
    upload = client.post(
        "/api/v1/submissions/upload",
        headers=auth,
        data={"exercise": EXERCISE, "learner": "alice"},
        files={"file": ("step.py", SYNTAX_ERROR_CODE.encode(), "text/x-python")},
    )
    assert upload.status_code == 422 and upload.json()["line"] == 2

    # The page, as the exercise page's script posts it: JSON with the line.
    page = f"/exercises/{EXERCISE}"
    token = csrf_token(client, page)
    in_place = client.post(
        page,
        data={"code": SYNTAX_ERROR_CODE, "csrf_token": token},
        headers={"Accept": "application/json"},
    )
    assert in_place.status_code == 422
    assert in_place.json()["line"] == 2
    # Without JavaScript: the form again, the message, the code still in it.
    plain = client.post(page, data={"code": SYNTAX_ERROR_CODE, "csrf_token": token})
    assert plain.status_code == 422
    assert "Syntax error on line 2: " in plain.text
    assert "loss = (1 +" in plain.text

    assert count_submissions(sessions) == 0
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(IdempotencyKey)) == 0
    # And the same key then takes the fixed code.
    assert post(client, auth, "syntax-1", code=MISSING_ZERO_GRAD_CODE).status_code == 202


def test_the_page_script_gets_json_and_a_retry_with_its_key_is_one_submission(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    page = f"/exercises/{EXERCISE}"
    token = csrf_token(client, page)
    headers = {"Accept": "application/json", "Idempotency-Key": "click-1"}
    answers = [
        client.post(
            page, data={"code": MISSING_ZERO_GRAD_CODE, "csrf_token": token}, headers=headers
        )
        for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [202, 202]
    first, retry = (a.json() for a in answers)
    assert first == retry
    assert first["url"] == f"/submissions/{first['id']}"
    assert first["events"] == f"/submissions/{first['id']}/events"
    assert count_submissions(sessions) == 1


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("def f(:\n    pass\n", 1),
        ("def f():\n\treturn 1\n        return 2\n", 3),  # TabError, a SyntaxError
        ("(" * 60_000, 1),  # too deep for the parser: said, not crashed on
        ("x = 1\x00\n", None),  # a NUL byte: no line
    ],
)
def test_the_syntax_check_says_the_line_of_hostile_and_broken_code(
    code: str, line: int | None
) -> None:
    with pytest.raises(CodeSyntaxError) as refused:
        check_syntax(code)
    assert refused.value.line == line
    assert refused.value.status_code == 422


def test_the_syntax_check_passes_code_that_compiles_however_deep() -> None:
    check_syntax("x = " + "-" * 60_000 + "1\n")
    check_syntax(CORRECT_CODE)


def test_the_page_script_whose_session_ended_is_told_where_to_sign_in_and_the_code_is_kept(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "ann@example.org")
    assert sign_in(client, "ann@example.org").status_code == 303
    page = f"/exercises/{EXERCISE}"
    token = token_of(client.get(page))
    with sessions.begin() as session:
        session.execute(update(WebSession).values(expires_at=utc_now()))

    sent = client.post(
        page,
        data={"code": MISSING_ZERO_GRAD_CODE, "csrf_token": token},
        headers={"Accept": "application/json", "Origin": str(client.base_url)},
    )
    assert sent.status_code == 401
    assert sent.json()["location"].startswith("/sign-in?ended=1&next=")
    assert KEPT_COOKIE in sent.cookies  # the browser that sent it gets it back
    assert count_submissions(sessions) == 0
    with sessions() as session:
        assert [k.code for k in session.scalars(select(KeptSubmission))] == [MISSING_ZERO_GRAD_CODE]
