"""Drafts over HTTP against a real server: who may read and write them, their CSRF token and
size bound, the code the exercise page opens on, and code kept across an ended session."""

from __future__ import annotations

import html
import re

import httpx
import pytest
from sqlalchemy import select, update

from app.db import SessionFactory
from app.grading import drafts
from app.grading.drafts import MAX_KEPT_PER_ADDRESS
from app.models import Draft, KeptSubmission, Submission, WebSession, utc_now
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE, REPO
from tests.app.people import PASSWORD, graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS

STARTER = (REPO / "exercises" / EXERCISE / "starter.py").read_text()
PRACTICE_DRAFT = f"/drafts/practice/{EXERCISE}"
MY_CODE = "def train_step(model, optimizer, loss_fn, x, y):\n    return 1.0  # mine\n"


def browser(client: httpx.Client, email: str) -> httpx.Client:
    """Another browser (its own cookies) signed in as `email`."""
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(other, email).status_code == 303
    return other


def editor_code(page: httpx.Response) -> str:
    match = re.search(r"<textarea[^>]*>\n?(.*?)</textarea>", page.text, re.S)
    assert match, "no editor on the page"
    return html.unescape(match[1])


def put(client: httpx.Client, path: str, code: str, token: str) -> httpx.Response:
    return client.put(path, json={"code": code}, headers={"X-CSRF-Token": token})


def test_a_draft_is_the_learners_own(client: httpx.Client, sessions: SessionFactory) -> None:
    make_user(sessions, "ann@example.org")
    make_user(sessions, "ben@example.org")
    ann = browser(client, "ann@example.org")
    page = ann.get(f"/exercises/{EXERCISE}")
    token = token_of(page)
    assert f'data-draft-url="{PRACTICE_DRAFT}"' in page.text
    assert ann.get(PRACTICE_DRAFT).status_code == 404

    saved = put(ann, PRACTICE_DRAFT, MY_CODE, token)
    assert saved.status_code == 200, saved.text
    assert saved.json()["code"] == MY_CODE
    assert ann.get(PRACTICE_DRAFT).json() == saved.json()
    # Saved again: still one row, the newer code.
    assert put(ann, PRACTICE_DRAFT, MY_CODE + "# more\n", token).status_code == 200
    with sessions() as session:
        assert [d.code for d in session.scalars(select(Draft))] == [MY_CODE + "# more\n"]

    # Ben reads and writes only his own: the same address is his (empty) draft.
    ben = browser(client, "ben@example.org")
    assert ben.get(PRACTICE_DRAFT).status_code == 404
    assert put(ben, PRACTICE_DRAFT, "ben's", token_of(ben.get("/"))).status_code == 200
    assert ann.get(PRACTICE_DRAFT).json()["code"] == MY_CODE + "# more\n"


def test_a_draft_needs_sign_in_and_the_pages_csrf_token(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    anonymous_token = token_of(client.get(f"/exercises/{EXERCISE}"))
    refused = put(client, PRACTICE_DRAFT, MY_CODE, anonymous_token)
    assert refused.status_code == 401
    assert "this browser keeps it" in refused.json()["detail"]
    assert client.get(PRACTICE_DRAFT).status_code == 401

    make_user(sessions, "ann@example.org")
    ann = browser(client, "ann@example.org")
    token = token_of(ann.get("/"))
    no_token = ann.put(PRACTICE_DRAFT, json={"code": MY_CODE})
    assert no_token.status_code == 403 and "reload the page" in no_token.json()["detail"]
    # The anonymous page's token is not the session's.
    assert put(ann, PRACTICE_DRAFT, MY_CODE, anonymous_token).status_code == 403
    other_site = ann.put(
        PRACTICE_DRAFT,
        json={"code": MY_CODE},
        headers={"X-CSRF-Token": token, "Origin": "https://evil.example"},
    )
    assert other_site.status_code == 403
    with sessions() as session:
        assert session.scalars(select(Draft)).all() == []


def test_a_draft_is_bounded_like_a_submission(
    client: httpx.Client, sessions: SessionFactory, settings: Settings
) -> None:
    make_user(sessions, "ann@example.org")
    ann = browser(client, "ann@example.org")
    token = token_of(ann.get("/"))
    too_large = put(ann, PRACTICE_DRAFT, "#" * (settings.max_code_bytes + 1), token)
    assert too_large.status_code == 413
    detail = too_large.json()["detail"]
    assert detail.startswith("The draft was not saved: code is") and "64 KiB" in detail
    nul = put(ann, PRACTICE_DRAFT, "x = 1\0", token)
    assert nul.status_code == 422 and "NUL" in nul.json()["detail"]
    shapeless = ann.put(PRACTICE_DRAFT, json={"text": "x"}, headers={"X-CSRF-Token": token})
    assert shapeless.status_code == 422
    unknown = put(ann, "/drafts/practice/no-such-exercise", MY_CODE, token)
    assert unknown.status_code == 404 and "no-such-exercise" in unknown.json()["detail"]
    with sessions() as session:
        assert session.scalars(select(Draft)).all() == []


def test_a_course_draft_needs_the_course(client: httpx.Client, sessions: SessionFactory) -> None:
    make_user(sessions, "tess@example.org")
    make_user(sessions, "ann@example.org")
    make_user(sessions, "cy@example.org")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org")
    path = f"/drafts/{course_id}/{EXERCISE}"
    ann = browser(client, "ann@example.org")
    page = ann.get(f"/courses/{course_id}/exercises/{EXERCISE}")
    assert f'data-draft-url="{path}"' in page.text
    assert put(ann, path, MY_CODE, token_of(page)).status_code == 200
    # The course's draft and the practice draft are two.
    assert ann.get(PRACTICE_DRAFT).status_code == 404

    cy = browser(client, "cy@example.org")
    cy_token = token_of(cy.get("/"))
    assert cy.get(path).status_code == 404
    assert put(cy, path, "mine now", cy_token).status_code == 404
    assert (
        put(ann, f"/drafts/{course_id}/no-such-exercise", MY_CODE, token_of(page)).status_code
        == 404
    )
    assert ann.get(path).json()["code"] == MY_CODE


def test_the_page_opens_on_the_draft_else_the_latest_submission_else_the_starter(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    ann_id = make_user(sessions, "ann@example.org")
    ann = browser(client, "ann@example.org")
    page_path = f"/exercises/{EXERCISE}"
    first = ann.get(page_path)
    assert editor_code(first) == STARTER
    assert 'data-code-saved-at=""' in first.text
    assert html.unescape(re.search(r'data-starter="([^"]*)"', first.text)[1]) == STARTER  # type: ignore[index]

    graded(sessions, user_id=ann_id, course_id=None, score=0, code="# submitted\n")
    assert editor_code(ann.get(page_path)) == "# submitted\n"

    saved = put(ann, PRACTICE_DRAFT, MY_CODE, token_of(first))
    reopened = ann.get(page_path)
    assert editor_code(reopened) == MY_CODE
    assert f'data-code-saved-at="{saved.json()["updated_at"]}"' in reopened.text
    # ?edit= a submission still opens that submission.
    with sessions() as session:
        submission_id = session.scalars(select(Submission.id)).one()
    assert editor_code(ann.get(f"{page_path}?edit={submission_id}")) == "# submitted\n"


def test_submitting_saves_the_draft(client: httpx.Client, sessions: SessionFactory) -> None:
    make_user(sessions, "ann@example.org")
    ann = browser(client, "ann@example.org")
    page_path = f"/exercises/{EXERCISE}"
    token = token_of(ann.get(page_path))
    put(ann, PRACTICE_DRAFT, MY_CODE, token)
    sent = ann.post(page_path, data={"code": CORRECT_CODE, "csrf_token": token})
    assert sent.status_code == 303 and sent.headers["location"].startswith("/submissions/")
    assert ann.get(PRACTICE_DRAFT).json()["code"] == CORRECT_CODE
    assert editor_code(ann.get(page_path)) == CORRECT_CODE


def test_code_sent_after_the_session_ended_is_kept_until_signed_in(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org")
    make_user(sessions, "ann@example.org")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org")
    page_path = f"/courses/{course_id}/exercises/{EXERCISE}"
    ann = browser(client, "ann@example.org")
    token = token_of(ann.get(page_path))
    with sessions.begin() as session:
        session.execute(update(WebSession).values(expires_at=utc_now()))

    origin = {"Origin": str(client.base_url)}
    sent = ann.post(page_path, data={"code": MY_CODE, "csrf_token": token}, headers=origin)
    assert sent.status_code == 303
    assert sent.headers["location"].startswith("/sign-in?ended=1&next=")
    with sessions() as session:
        assert session.scalars(select(Submission)).all() == []
        assert [k.code for k in session.scalars(select(KeptSubmission))] == [MY_CODE]
    sign_in_page = ann.get(sent.headers["location"])
    assert "Your session ended before your code was submitted. It is kept" in sign_in_page.text

    signed_in = ann.post(
        "/sign-in",
        data={
            "email": "ann@example.org",
            "password": PASSWORD,
            "next": page_path,
            "csrf_token": token_of(sign_in_page),
        },
    )
    assert signed_in.status_code == 303 and signed_in.headers["location"] == page_path
    back = ann.get(page_path)
    assert editor_code(back) == MY_CODE
    assert "Your session had ended, so this code was not submitted" in back.text
    # Another browser signed in as Ann has no kept code: it belongs to the browser that sent it.
    assert editor_code(browser(client, "ann@example.org").get(page_path)) == STARTER

    submitted = ann.post(page_path, data={"code": MY_CODE, "csrf_token": token_of(back)})
    assert submitted.status_code == 303 and submitted.headers["location"].startswith(
        "/submissions/"
    )
    with sessions() as session:
        assert session.scalars(select(KeptSubmission)).all() == []
        assert [s.code for s in session.scalars(select(Submission))] == [MY_CODE]
    assert "this code was not submitted" not in ann.get(page_path).text


def test_a_stale_form_from_elsewhere_is_still_refused(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    page_path = f"/exercises/{EXERCISE}"
    for headers in ({}, {"Origin": "https://evil.example"}):
        refused = client.post(page_path, data={"code": MY_CODE, "csrf_token": "x"}, headers=headers)
        assert refused.status_code == 403 and "Form expired" in refused.text
    with sessions() as session:
        assert session.scalars(select(KeptSubmission)).all() == []


def test_one_address_keeps_only_so_many(client: httpx.Client, sessions: SessionFactory) -> None:
    page_path = f"/exercises/{EXERCISE}"
    origin = {"Origin": str(client.base_url)}
    for _ in range(MAX_KEPT_PER_ADDRESS):
        kept = client.post(page_path, data={"code": MY_CODE, "csrf_token": "x"}, headers=origin)
        assert kept.status_code == 303
    refused = client.post(page_path, data={"code": MY_CODE, "csrf_token": "x"}, headers=origin)
    assert refused.status_code == 403 and "Form expired" in refused.text
    with sessions() as session:
        assert len(session.scalars(select(KeptSubmission)).all()) == MAX_KEPT_PER_ADDRESS


def test_all_addresses_together_keep_only_so_many(
    proxied_client: httpx.Client, sessions: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drafts, "MAX_KEPT_IN_TOTAL", 3)
    page_path = f"/exercises/{EXERCISE}"
    origin = {"Origin": str(proxied_client.base_url)}

    def keep_from(address: str) -> httpx.Response:
        return proxied_client.post(
            page_path,
            data={"code": MY_CODE, "csrf_token": "x"},
            headers={**origin, "X-Forwarded-For": address},
        )

    for n in range(3):
        assert keep_from(f"192.0.2.{n}").status_code == 303
    refused = keep_from("192.0.2.9")
    assert refused.status_code == 403 and "Form expired" in refused.text
    with sessions.begin() as session:
        assert len(session.scalars(select(KeptSubmission)).all()) == 3
        # Expired ones are swept when code is next kept, and count no more.
        session.execute(update(KeptSubmission).values(expires_at=utc_now()))
    assert keep_from("192.0.2.9").status_code == 303
    with sessions() as session:
        assert session.scalars(select(KeptSubmission.client_address)).all() == ["192.0.2.9"]
