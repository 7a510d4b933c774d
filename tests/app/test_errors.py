"""Errors carry their status; one handler answers JSON under /api/ and a page elsewhere."""

from __future__ import annotations

import httpx

from app.settings import Settings
from tests.app.conftest import EXERCISE


def is_page(response: httpx.Response) -> bool:
    return response.headers["content-type"].startswith("text/html") and "<h1>" in response.text


def test_an_unknown_address_is_a_page_outside_the_api_and_json_inside(
    client: httpx.Client, auth: dict[str, str]
) -> None:
    page = client.get("/no/such/page")
    assert page.status_code == 404
    assert is_page(page)
    assert "There is no page at this address" in page.text
    assert "detail" not in page.text

    api = client.get("/api/v1/no-such-thing", headers=auth)
    assert api.status_code == 404
    assert api.headers["content-type"] == "application/json"
    assert api.json() == {"detail": "Not Found"}


def test_a_domain_error_answers_with_its_own_status_on_both_surfaces(
    client: httpx.Client, auth: dict[str, str]
) -> None:
    # UnknownExerciseId is a SubmissionRejected: 422, as JSON over the API...
    api = client.post(
        "/api/v1/submissions",
        headers=auth,
        json={"exercise": "no-such-exercise", "learner": "alice", "code": "x = 1\n"},
    )
    assert api.status_code == 422
    assert "unknown exercise 'no-such-exercise'" in api.json()["detail"]

    # ...and a submission that is not the viewer's is a 404 page.
    page = client.get("/submissions/not-a-submission")
    assert page.status_code == 404
    assert is_page(page)
    assert "not yours to see" in page.text


def test_an_oversized_body_is_a_page_for_a_form_and_json_for_the_api(
    client: httpx.Client, auth: dict[str, str], settings: Settings
) -> None:
    too_big = b"x" * (settings.request_body_bytes + 1)
    form = client.post(
        f"/exercises/{EXERCISE}",
        content=too_big,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 413
    assert is_page(form)

    api = client.post(
        "/api/v1/submissions",
        content=too_big,
        headers={**auth, "content-type": "application/json"},
    )
    assert api.status_code == 413
    assert "request body over" in api.json()["detail"]
